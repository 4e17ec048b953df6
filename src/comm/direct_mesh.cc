#include "comm/direct_mesh.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>

#include "comm/reduce.h"
#include "net/frame.h"
#include "net/socket.h"

namespace hpct::comm {
namespace {

constexpr std::size_t kTokenChars = 32;
constexpr Millis kHelloBound(5000);  // a connection's handshake and rank frame, at the most

std::string random_token() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string t;
  while (t.size() < kTokenChars) {
    std::uint32_t v = rd();
    for (int i = 0; i < 8 && t.size() < kTokenChars; ++i, v >>= 4) t += hex[v & 15];
  }
  return t;
}

int poll_ms(const Deadline& d) {
  auto left = d.remaining().count();
  return static_cast<int>(std::min<long long>(left, 1 << 30));
}

// A connection's first frame after the handshake: the connecting rank.
constexpr std::size_t kRankFrameBytes = 4;

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream os;
  for (std::size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  return os.str();
}

}  // namespace

DirectMesh::DirectMesh(const DirectMeshOptions& options)
    : options_(options), peers_(options.size) {}

std::unique_ptr<DirectMesh> DirectMesh::connect(const DirectMeshOptions& o) {
  const std::string who =
      "direct connections on rank " + std::to_string(o.rank) + " of " + std::to_string(o.size);
  if (!o.store) throw_invalid_argument(who + ": no store to meet the other ranks through");
  std::unique_ptr<DirectMesh> mesh(new DirectMesh(o));
  if (o.size == 1) return mesh;
  const Deadline deadline(o.timeout);

  // 1. Listen and publish.
  int port = 0;
  UniqueFd listener;
  try {
    listener = net::listen_tcp(o.ip, 0, &port, who);
  } catch (const Error& e) {
    throw Error(ErrorCode::kIo, who + ": cannot listen on " + o.ip + ": " + e.what());
  }
  if (o.rank == 0) o.store->set(o.key_prefix + "token", random_token());
  o.store->set(o.key_prefix + "addr/" + std::to_string(o.rank), o.ip + " " + std::to_string(port));
  const std::string token = o.store->get(o.key_prefix + "token", deadline.remaining());

  // 2. Connect to every lower rank (their listen backlog holds us until they accept).
  for (int p = 0; p < o.rank; ++p) {
    std::istringstream is(
        o.store->get(o.key_prefix + "addr/" + std::to_string(p), deadline.remaining()));
    std::string ip;
    int their_port = 0;
    is >> ip >> their_port;
    const std::string what = "rank " + std::to_string(p) + " at " + ip + " port " +
                             std::to_string(their_port);
    try {
      UniqueFd fd = net::connect_tcp(ip, their_port, deadline.end(), what);
      const net::Mac key = net::client_handshake(fd.get(), token, deadline.end(), what);
      char rank_bytes[kRankFrameBytes];
      for (std::size_t i = 0; i < kRankFrameBytes; ++i) {
        rank_bytes[i] = static_cast<char>(static_cast<std::uint32_t>(o.rank) >> (8 * i));
      }
      net::FrameChannel(fd.get(), key, net::Direction::kClientToServer, kRankFrameBytes, -1, what)
          .send(std::string_view(rank_bytes, kRankFrameBytes), deadline.end());
      mesh->peers_[p] = std::move(fd);
    } catch (const Error& e) {
      throw Error(e.code() == ErrorCode::kAuth || deadline.expired() ? e.code()
                                                                     : ErrorCode::kPeerFailure,
                  who + ": cannot connect to " + what + ": " + e.what());
    }
  }

  // 3. Accept every higher rank; a connection that fails the handshake (no
  //    token) or names a rank not expected is dropped.
  int expected = o.size - 1 - o.rank;
  while (expected > 0) {
    pollfd pfd{listener.get(), POLLIN, 0};
    if (::poll(&pfd, 1, poll_ms(deadline)) <= 0 || deadline.expired()) {
      std::vector<int> missing;
      for (int p = o.rank + 1; p < o.size; ++p) {
        if (!mesh->peers_[p].valid()) missing.push_back(p);
      }
      throw Error(ErrorCode::kTimeout, who + ": ranks [" + rank_list(missing) +
                                           "] did not connect within " +
                                           std::to_string(o.timeout.count()) + " ms");
    }
    UniqueFd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) continue;
    const auto hello_until = SteadyClock::now() + std::min(deadline.remaining(), kHelloBound);
    const std::string peer = "a connection to " + who + " from " + net::peer_address(fd.get());
    std::uint32_t from = 0;
    try {
      const net::Mac key = net::server_handshake(fd.get(), token, hello_until, -1, peer);
      const std::string rank_bytes =
          net::FrameChannel(fd.get(), key, net::Direction::kServerToClient, kRankFrameBytes, -1,
                            peer)
              .recv(hello_until, kHelloBound);
      if (rank_bytes.size() != kRankFrameBytes) continue;
      for (std::size_t i = 0; i < kRankFrameBytes; ++i) {
        from |= static_cast<std::uint32_t>(static_cast<unsigned char>(rank_bytes[i])) << (8 * i);
      }
    } catch (const Error&) {
      continue;  // not one of this job's ranks (wrong token, silent, another protocol)
    }
    if (from <= static_cast<std::uint32_t>(o.rank) || from >= static_cast<std::uint32_t>(o.size) ||
        mesh->peers_[from].valid()) {
      continue;  // a rank not expected here, or a duplicate: dropped
    }
    mesh->peers_[from] = std::move(fd);
    --expected;
  }
  for (auto& fd : mesh->peers_) {
    if (fd.valid()) net::set_nodelay(fd.get());  // accepted sockets do not inherit it
  }
  return mesh;
}

void DirectMesh::exchange(int peer, const void* send, std::size_t send_bytes, void* recv,
                          std::size_t recv_bytes, const Deadline& deadline,
                          const Reduction* reduction) {
  transfer(peer, send, send_bytes, peer, recv, recv_bytes, deadline, reduction);
}

void DirectMesh::transfer(int to, const void* send, std::size_t send_bytes, int from, void* recv,
                          std::size_t recv_bytes, const Deadline& deadline,
                          const Reduction* reduction) {
  // Pieces of 256 KiB: small enough to reduce while the socket buffers fill.
  const std::size_t element = reduction != nullptr ? dtype_size(reduction->dtype) : 1;
  const std::size_t piece =
      std::max<std::size_t>(element, (std::size_t{256} << 10) / element * element);
  std::size_t reduced = 0;
  if (closed_)
    throw DirectLinkError(ErrorCode::kPeerFailure, world(to),
                          "direct connections closed after a failure");
  const int out_fd = peers_[to].get();
  const int in_fd = peers_[from].get();
  const auto* out = static_cast<const std::uint8_t*>(send);
  auto* in = static_cast<std::uint8_t*>(recv);
  std::size_t sent = 0, got = 0;
  while (sent < send_bytes || got < recv_bytes || (reduction != nullptr && reduced < recv_bytes)) {
    bool progress = false;
    if (sent < send_bytes) {
      ssize_t w = ::send(out_fd, out + sent, send_bytes - sent, MSG_NOSIGNAL);
      if (w > 0) {
        sent += static_cast<std::size_t>(w);
        progress = true;
      } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        throw DirectLinkError(
            ErrorCode::kPeerFailure, world(to),
            std::string("send to rank ") + std::to_string(world(to)) + ": " + std::strerror(errno));
      }
    }
    if (got < recv_bytes) {
      ssize_t r = ::recv(in_fd, in + got, recv_bytes - got, 0);
      if (r > 0) {
        got += static_cast<std::size_t>(r);
        progress = true;
      } else if (r == 0) {
        throw DirectLinkError(ErrorCode::kPeerFailure, world(from),
                              "connection closed by rank " + std::to_string(world(from)));
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        throw DirectLinkError(ErrorCode::kPeerFailure, world(from),
                              std::string("receive from rank ") + std::to_string(world(from)) +
                                  ": " + std::strerror(errno));
      }
    }
    if (reduction != nullptr) {
      const std::size_t ready = (reduction->after_send ? std::min(sent, got) : got) / element * element;
      if (ready > reduced && (ready - reduced >= piece || ready == recv_bytes)) {
        auto* d = static_cast<std::uint8_t*>(reduction->data) + reduced;
        const std::uint8_t* theirs = in + reduced;
        const std::size_t n = (ready - reduced) / element;
        if (reduction->peer_is_lower) {
          reduce_elements(d, theirs, d, n, reduction->dtype, reduction->op);
        } else {
          reduce_elements(d, d, theirs, n, reduction->dtype, reduction->op);
        }
        reduced = ready;
        progress = true;
      }
    }
    if (progress || (sent == send_bytes && got == recv_bytes)) continue;
    pollfd pfd[2] = {{out_fd, static_cast<short>(sent < send_bytes ? POLLOUT : 0), 0},
                     {in_fd, static_cast<short>(got < recv_bytes ? POLLIN : 0), 0}};
    nfds_t count = 2;
    if (out_fd == in_fd) {
      pfd[0].events = static_cast<short>(pfd[0].events | pfd[1].events);
      count = 1;
    }
    int rc = ::poll(pfd, count, poll_ms(deadline));
    if (rc == 0 || (rc < 0 && errno != EINTR) || deadline.expired()) {
      const int waited = got < recv_bytes ? from : to;
      throw DirectLinkError(ErrorCode::kTimeout, world(waited),
                            "waited " + std::to_string(deadline.budget().count()) +
                                " ms for rank " + std::to_string(world(waited)) + " (sent " +
                                std::to_string(sent) + " of " + std::to_string(send_bytes) +
                                " bytes to rank " + std::to_string(world(to)) + ", received " +
                                std::to_string(got) + " of " + std::to_string(recv_bytes) +
                                " from rank " + std::to_string(world(from)) + ")");
    }
  }
}

void DirectMesh::reduce_scatter(const void* input, void* output, const std::vector<std::size_t>& counts,
                                DataType dtype, ReduceOp op, const Deadline& deadline) {
  const int n = options_.size;
  const int rank = options_.rank;
  const std::size_t es = dtype_size(dtype);
  std::vector<std::size_t> offset(static_cast<std::size_t>(n) + 1, 0);
  for (int p = 0; p < n; ++p) offset[p + 1] = offset[p] + counts[p];
  const std::size_t mine = counts[rank];
  const auto* in = static_cast<const std::uint8_t*>(input);
  if (scratch_.size() < n * mine * es) scratch_.resize(n * mine * es);
  // Step k: to rank+k, from rank-k; both at once, so no order can deadlock.
  for (int k = 1; k < n; ++k) {
    const int to = (rank + k) % n;
    const int from = (rank - k + n) % n;
    transfer(to, in + offset[to] * es, counts[to] * es, from, scratch_.data() + from * mine * es, mine * es,
             deadline);
  }
  std::vector<const void*> blocks;
  for (int q = 0; q < n; ++q) blocks.push_back(q == rank ? in + offset[q] * es : scratch_.data() + q * mine * es);
  reduce_in_order(output, blocks, mine, dtype, op);
}

void DirectMesh::allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op,
                           const Deadline& deadline) {
  const int n = options_.size;
  const int rank = options_.rank;
  if (n == 1 || count == 0) return;
  const std::size_t bytes = count * dtype_size(dtype);
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  void* other = scratch_.data();
  const ReduceOp combine = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  if (n >= 3 && bytes >= options_.ring_from_bytes) {
    ring_allreduce(data, count, dtype, combine, deadline);
    if (op == ReduceOp::kAvg) finish_average(data, count, dtype, n);
    return;
  }
  // f(lower rank's data, higher rank's data): the same bits on both partners.
  auto reduce_with = [&](int peer) {
    if (peer < rank) {
      reduce_elements(data, other, data, count, dtype, combine);
    } else {
      reduce_elements(data, data, other, count, dtype, combine);
    }
  };

  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  int virtual_rank = -1;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      exchange(rank + 1, data, bytes, nullptr, 0, deadline);
    } else {
      exchange(rank - 1, nullptr, 0, other, bytes, deadline);
      reduce_with(rank - 1);
      virtual_rank = rank / 2;
    }
  } else {
    virtual_rank = rank - rem;
  }
  if (virtual_rank >= 0) {
    for (int mask = 1; mask < p; mask <<= 1) {
      const int partner_virtual = virtual_rank ^ mask;
      const int peer = partner_virtual < rem ? partner_virtual * 2 + 1 : partner_virtual + rem;
      const Reduction r{data, dtype, combine, peer < rank};
      exchange(peer, data, bytes, other, bytes, deadline, &r);
    }
  }
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      exchange(rank + 1, nullptr, 0, data, bytes, deadline);
    } else {
      exchange(rank - 1, data, bytes, nullptr, 0, deadline);
    }
  }
  if (op == ReduceOp::kAvg) finish_average(data, count, dtype, n);
}

void DirectMesh::ring_allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op,
                                const Deadline& deadline) {
  const int n = options_.size;
  const int rank = options_.rank;
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  const std::size_t es = dtype_size(dtype);
  auto* bytes = static_cast<std::uint8_t*>(data);
  auto begin = [&](int chunk) { return count * static_cast<std::size_t>(chunk) / n; };
  auto chunk_of = [&](int step) { return ((step % n) + n) % n; };
  // Reduce-scatter: after n-1 steps this rank holds chunk rank+1 summed over
  // every rank, reduced in the ring's order from rank+2 on.
  for (int s = 0; s < n - 1; ++s) {
    const int out = chunk_of(rank - s), in = chunk_of(rank - s - 1);
    const std::size_t in_count = begin(in + 1) - begin(in);
    const Reduction r{bytes + begin(in) * es, dtype, op, true, false};
    transfer(right, bytes + begin(out) * es, (begin(out + 1) - begin(out)) * es, left,
             scratch_.data(), in_count * es, deadline, &r);
  }
  // Allgather: the finished chunks go round once more, straight into place,
  // so every rank ends with the owner's bits.
  for (int s = 0; s < n - 1; ++s) {
    const int out = chunk_of(rank + 1 - s), in = chunk_of(rank - s);
    transfer(right, bytes + begin(out) * es, (begin(out + 1) - begin(out)) * es, left,
             bytes + begin(in) * es, (begin(in + 1) - begin(in)) * es, deadline);
  }
}

void DirectMesh::close() {
  closed_ = true;
  for (auto& fd : peers_) {
    if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
  }
}

}  // namespace hpct::comm
