#include "comm/gloo/communicator.h"

#include <gloo/allgatherv.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "comm/gloo/detail.h"
#include "comm/gloo/failure_report.h"
#include "comm/gloo/socket_table.h"
#include "comm/gloo/store_adapter.h"
#include "comm/reduce.h"

namespace hpct::comm {

using namespace gloo_detail;

namespace {

// Slot prefixes for the ops we build from unbound buffers ourselves; Gloo's
// own collectives use 0x01..0x08 (gloo/types.h).
constexpr std::uint8_t kSendRecvSlotPrefix = 0x40;

std::string address_key(int rank) { return "hpct/addr/" + std::to_string(rank); }
std::string outgoing_key(int rank) { return "hpct/outaddr/" + std::to_string(rank); }

std::string local_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

// "[127.0.0.1]:41234" -> "127.0.0.1"; the input when it has no brackets.
std::string ip_of(const std::string& gloo_address) {
  const auto open = gloo_address.find('['), close = gloo_address.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return gloo_address;
  return gloo_address.substr(open + 1, close - open - 1);
}

// Gloo writes to its sockets with writev, which raises SIGPIPE when the peer
// has died; the default action would kill this rank before it could raise
// PeerFailure naming the peer. A handler the program installed is kept.
void ignore_sigpipe_if_default() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

GlooCommunicator::GlooCommunicator(const GlooOptions& options)
    : Communicator(options.timeout, options.rank, options.size),
      store_(options.store),
      options_(options),
      host_(local_host_name()),
      peers_(options.size) {}

GlooCommunicator::~GlooCommunicator() {
  // Closing first makes the device's I/O thread drop every socket before the
  // context is torn down; none of it waits on a peer.
  try {
    if (context_) context_->closeConnections();
  } catch (const std::exception&) {
  }
  context_.reset();
  device_.reset();
}

std::unique_ptr<GlooCommunicator> GlooCommunicator::connect(const GlooOptions& options) {
  const std::string who = "gloo connect on rank " + std::to_string(options.rank) + " of " +
                          std::to_string(options.size);
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw_invalid_argument(who + ": rank must be in 0..size-1 and size at least 1");
  }
  if (!options.store) throw_invalid_argument(who + ": no store to meet the other ranks through");
  if (options.timeout.count() <= 0) throw_invalid_argument(who + ": timeout must be positive");
  if (options.address.empty() && options.interface.empty()) {
    throw_invalid_argument(who + ": give an address to bind to or a network interface");
  }
  std::unique_ptr<GlooCommunicator> comm(new GlooCommunicator(options));
  if (options.size > 1) {
    ignore_sigpipe_if_default();
    comm->connect_mesh();
    comm->publish_and_read_addresses();
  }
  comm->peers_[options.rank].host = comm->host_;
  comm->options_.logger.debug("comm", who + ": connected (host " + comm->host_ + ")");
  if (options.shm && options.size > 1) {
    std::string why;
    comm->shm_ = connect_shm(*comm, options.shm_slot_bytes, &why);
    if (!comm->shm_) {
      const bool expected = why.rfind("the ranks span hosts", 0) == 0;
      (expected
           ? comm->options_.logger.debug("comm", who + ": allreduces use Gloo: " + why)
           : comm->options_.logger.warn(
                 "comm", who + ": shared-memory allreduce is off, allreduces use Gloo: " + why));
    }
  }
  if (options.size > 2 && !comm->shm_ && options.hierarchical) comm->connect_hierarchy();
  // Every rank reaches the same verdict on shm (connect_shm agrees on it), so
  // every rank (or none) makes the direct connections.
  if (options.size > 1 && !comm->shm_ && options.direct_allreduce_bytes > 0) {
    comm->connect_direct(who);
  }
  return comm;
}

void GlooCommunicator::connect_mesh() {
  const std::string who = "gloo connect on rank " + std::to_string(rank_) + " of " +
                          std::to_string(size_) + " (host " + host_ + ")";
  gloo::transport::tcp::attr attr;
  if (!options_.address.empty()) {
    attr.hostname = options_.address;
  } else {
    attr.iface = options_.interface;
  }
  const std::string where_bound =
      options_.address.empty() ? "interface " + options_.interface : "address " + options_.address;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kIo,
                who + ": cannot use " + where_bound + ": " + strip_gloo_location(e.what()));
  }
  auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
  context->setTimeout(options_.timeout);
  GlooStoreAdapter adapter(store_, options_.timeout);
  try {
    context->connectFullMesh(adapter, device_);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kTimeout) throw;
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      try {
        if (!store_->check({GlooStoreAdapter::store_key(std::to_string(r))})) missing.push_back(r);
      } catch (const std::exception&) {
      }
    }
    throw_timeout(who + ": rank(s) [" + rank_list(missing) + "] did not show up within " +
                  std::to_string(options_.timeout.count()) + " ms: " + e.what());
  } catch (const gloo::EnforceNotMet& e) {
    throw Error(ErrorCode::kIo, who + " (" + where_bound + "): " + strip_gloo_location(e.what()));
  } catch (const gloo::Exception& e) {
    const std::string detail = strip_gloo_location(e.what());
    throw Error(classify_gloo_message(detail), who + " (" + where_bound + "): " + detail);
  }
  context_ = std::move(context);
}

void GlooCommunicator::publish_and_read_addresses() {
  // One line per field; addr lines in peer order, skipping this rank.
  std::string mine = "host=" + host_ + "\n";
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const std::string a = context_->getPair(p)->address().str();
    if (peers_[rank_].ip.empty()) peers_[rank_].ip = ip_of(a);
    peers_[rank_].addresses.push_back(a);
    mine += "addr=" + a + "\n";
  }
  store_->set(address_key(rank_), mine);
  // Every rank got here only after connecting to every other rank, and
  // publishes right after: this wait is short unless a rank crashed now.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const std::string text = store_->get(address_key(p), options_.timeout);
    std::istringstream is(text);
    std::string line;
    while (std::getline(is, line)) {
      if (line.rfind("host=", 0) == 0) peers_[p].host = line.substr(5);
      if (line.rfind("addr=", 0) == 0) {
        peers_[p].addresses.push_back(line.substr(5));
        if (peers_[p].ip.empty()) peers_[p].ip = ip_of(line.substr(5));
      }
    }
  }
  publish_and_read_outgoing_addresses();
}

void GlooCommunicator::publish_and_read_outgoing_addresses() {
  // The connections this rank opened end at a peer's listening address; their
  // local ends are ephemeral ports that only this rank knows (socket_table.h).
  std::set<std::string> listening;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    listening.insert(peers_[p].addresses.begin(), peers_[p].addresses.end());
  }
  std::string mine;
  for (const auto& c : established_tcp_connections()) {
    if (listening.count(c.remote) != 0) mine += "out=" + c.local + "\n";
  }
  store_->set(outgoing_key(rank_), mine);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    std::istringstream is(store_->get(outgoing_key(p), options_.timeout));
    std::string line;
    while (std::getline(is, line)) {
      if (line.rfind("out=", 0) == 0) peers_[p].addresses.push_back(line.substr(4));
    }
  }
}

std::string GlooCommunicator::describe_rank(int rank) const {
  if (rank < 0 || rank >= size_) return "unknown rank";
  const PeerInfo& p = peers_[rank];
  std::string s = "host " + (p.host.empty() ? std::string("unknown") : p.host);
  if (!p.ip.empty()) s += " " + p.ip;
  return s;
}

int GlooCommunicator::rank_of_address(const std::string& message) const {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    for (const auto& a : peers_[p].addresses) {
      for (size_t at = message.find(a); at != std::string::npos; at = message.find(a, at + 1)) {
        // "[ip]:4123" must not match "[ip]:41234".
        const size_t end = at + a.size();
        if (end == message.size() || !std::isdigit(static_cast<unsigned char>(message[end]))) {
          return p;
        }
      }
    }
  }
  return -1;
}

std::string GlooCommunicator::algorithm(OpKind op, size_t bytes) const {
  if (size_ == 1 || bytes == 0) return "local";
  switch (op) {
    case OpKind::kAllreduce:
      if (shm_) return "shm:reduce-scatter+allgather";
      if (takes_hierarchy(bytes, ReduceOp::kSum)) return "hier:shm+direct+shm";
      return takes_direct(bytes) ? "direct:recursive-doubling" : "ring";
    case OpKind::kBroadcast:
      return "binomial-tree";
    case OpKind::kAllgather:
      return "ring";
    case OpKind::kAllgatherv:
      return "ring";
    case OpKind::kReduceScatter:
      return "ring";
    case OpKind::kBarrier:  // comm::barrier: a one-byte allreduce
      return algorithm(OpKind::kAllreduce, 1);
  }
  return "unknown";
}

void GlooCommunicator::fail(const std::string& what, Millis timeout, int peer, ErrorCode code,
                            const std::string& detail) {
  FailureReport own;
  own.reporter = rank_;
  own.code = code;
  own.suspect = rank_of_address(detail);
  if (own.suspect < 0) own.suspect = peer;
  own.op = what;
  own.detail = detail;

  // failure_report.h, steps 2-5, within one bound.
  const Deadline reports(std::min(options_.failure_report_wait, timeout / 2));
  const std::string store_error = publish_failure_report(*store_, own, reports);
  if (direct_) direct_->close();
  if (hier_) hier_->across->close();
  try {
    if (context_) context_->closeConnections();
  } catch (const std::exception&) {
  }
  const CollectedReports others = collect_failure_reports(*store_, own, size_, reports);
  const FailureVerdict v = judge_failure(own, others);

  std::string m = what + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                  " (gloo, host " + host_ + "): ";
  if (v.code == ErrorCode::kPeerFailure && v.culprit >= 0) {
    m += "peer rank " + std::to_string(v.culprit) + " (" + describe_rank(v.culprit) + ") failed: ";
    if (v.witness == rank_) {
      m += detail;
    } else {
      std::string seen;
      for (const auto& r : others.reports) {
        if (r.reporter == v.witness) seen = r.detail;
      }
      m += "rank " + std::to_string(v.witness) + " saw: " + seen + "; this rank saw";
      if (own.suspect >= 0)
        m += " (from rank " + std::to_string(own.suspect) + ", after it failed)";
      m += ": " + detail;
    }
  } else if (v.code == ErrorCode::kTimeout && !v.missing.empty()) {
    m += "timed out after " + std::to_string(timeout.count()) + " ms; ";
    if (v.missing.size() == 1) {
      m += "peer rank " + std::to_string(v.missing[0]) + " (" + describe_rank(v.missing[0]) +
           ") is not responding";
    } else {
      m += "peer ranks [" + rank_list(v.missing) + "] are not responding";
    }
    m += " (stopped, hung, or not in this operation); this rank saw: " + detail;
    // Nobody answering, the job's store included: the loss is on this side.
    if (!store_error.empty() && v.missing.size() + 1 == static_cast<size_t>(size_)) {
      m += "; the job's store did not answer either (" + store_error +
           "): this rank's host may be cut off from the network";
    }
  } else {
    if (v.code == ErrorCode::kTimeout) {
      m += "timed out after " + std::to_string(timeout.count()) + " ms";
    } else {
      m += "failed";
    }
    if (v.culprit >= 0) {
      m += " talking to peer rank " + std::to_string(v.culprit) + " (" + describe_rank(v.culprit) +
           ")";
    }
    m += ": " + detail;
  }
  options_.logger.error("comm", m);
  latch_.fail(Error(v.code, m));
}

void GlooCommunicator::do_allreduce(const AllreduceOptions& o) {
  if (shm_) {
    run_shm(o.count, o.dtype, o.timeout, [&](const Deadline& d) {
      shm_->allreduce(o.input == o.output ? nullptr : o.input, o.output, o.count, o.dtype, o.op, d);
    });
    return;
  }
  if (takes_hierarchy(o.count * dtype_size(o.dtype), o.op)) {
    hierarchical_allreduce(o);
    return;
  }
  if (takes_direct(o.count * dtype_size(o.dtype))) {
    direct_allreduce(o);
    return;
  }
  ring_allreduce(o);
}

bool GlooCommunicator::do_allreduce_segments(const AllreduceSegmentsOptions& o) {
  if (!shm_) return false;
  std::size_t count = 0;
  for (const auto& seg : o.segments) count += seg.count;
  run_shm(count, o.dtype, o.timeout,
          [&](const Deadline& d) { shm_->allreduce(o.segments, o.dtype, o.op, d); });
  return true;
}

// The shared-memory path's one error rule: bad arguments are the caller's;
// any other failure (Timeout, PeerFailure) breaks the communicator.
template <typename Fn>
void GlooCommunicator::run_shm(size_t count, DataType dtype, Millis timeout, Fn&& fn) {
  latch_.throw_if_failed();
  try {
    fn(Deadline(timeout));
  } catch (const Error& e) {
    Error named(e.code(), describe_op("allreduce", count, dtype) + " on rank " +
                              std::to_string(rank_) + " of " + std::to_string(size_) +
                              " (gloo, host " + host_ + "): " + e.what());
    if (e.code() == ErrorCode::kInvalidArgument) throw named;
    latch_.fail(named);
  }
}

void GlooCommunicator::do_broadcast(const BroadcastOptions& o) {
  run(describe_op("broadcast", o.count, o.dtype) + " from root " + std::to_string(o.root),
      o.timeout, -1, [&] {
        if (o.count == 0 || size_ == 1) return;
        gloo::BroadcastOptions g(context_);
        with_element_type(
            o.dtype, [&](auto t) { g.setOutput(static_cast<decltype(t)*>(o.buffer), o.count); });
        g.setRoot(o.root);
        g.setTag(o.tag);
        g.setTimeout(o.timeout);
        gloo::broadcast(g);
      });
}

void GlooCommunicator::do_allgatherv(const AllgathervOptions& o) {
  size_t total = 0;
  for (size_t c : o.counts) total += c;
  run(describe_op("allgatherv", total, o.dtype), o.timeout, -1, [&] {
    if (total == 0) return;
    const size_t mine = o.counts[rank_];
    if (size_ == 1) {
      if (o.input != o.output) std::memmove(o.output, o.input, mine * dtype_size(o.dtype));
      return;
    }
    gloo::AllgathervOptions g(context_);
    with_element_type(o.dtype, [&](auto t) {
      using T = decltype(t);
      // Gloo wants a real pointer even for an empty contribution.
      T dummy{};
      T* in = mine == 0 ? &dummy : static_cast<T*>(const_cast<void*>(o.input));
      g.setInput(in, mine);
      g.setOutput(static_cast<T*>(o.output), o.counts);
    });
    g.setTag(o.tag);
    g.setTimeout(o.timeout);
    gloo::allgatherv(g);
  });
}

void GlooCommunicator::do_send(const SendOptions& o) {
  run(describe_op("send", o.count, o.dtype) + " to rank " + std::to_string(o.peer) + " tag " +
          std::to_string(o.tag),
      o.timeout, o.peer, [&] {
        if (o.count == 0) return;
        const Deadline deadline(o.timeout);
        auto buf =
            context_->createUnboundBuffer(const_cast<void*>(o.data), o.count * dtype_size(o.dtype));
        buf->send(o.peer, gloo::Slot::build(kSendRecvSlotPrefix, o.tag));
        wait_send(*buf, deadline);
      });
}

void GlooCommunicator::do_recv(const RecvOptions& o) {
  run(describe_op("recv", o.count, o.dtype) + " from rank " + std::to_string(o.peer) + " tag " +
          std::to_string(o.tag),
      o.timeout, o.peer, [&] {
        if (o.count == 0) return;
        const Deadline deadline(o.timeout);
        auto buf = context_->createUnboundBuffer(o.data, o.count * dtype_size(o.dtype));
        buf->recv(o.peer, gloo::Slot::build(kSendRecvSlotPrefix, o.tag));
        wait_recv(*buf, deadline);
      });
}

}  // namespace hpct::comm
