#include "plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hpct::plan {
namespace {

// Recursive doubling's exchanges among n ranks: log2 p, plus a fold in and
// out for the ranks past p, the largest power of two <= n.
int doubling_steps(int n) {
  int p = 1, log = 0;
  while (p * 2 <= n) p *= 2, ++log;
  return log + (n > p ? 2 : 0);
}

// comm::kHierarchyRingFromBytes (comm/direct_mesh.h): from this slice size
// on, the hierarchical path crosses 3 or more hosts by a ring.
constexpr double kHierarchyRingFromBytes = 256.0 * 1024;

// One host's shared-memory allreduce of L ranks. Its copies and sums are
// CPU work: where hosts share cores (namespace hosts on one machine), every
// host's step runs at once on the same cores, so the ranks on those cores
// beyond one per core take turns (as the calibration's own ranks did if
// they outnumbered the cores).
double shm_time(const Calibration& cal, const Scenario& s, double bytes) {
  const int local = s.ranks_per_host;
  if (local < 2) return 0;
  const AlphaBeta& a = cal.algorithm("shm");
  const double moved = 2.0 * (local - 1) / local;
  const double measured = a.ranks >= 2 ? 2.0 * (a.ranks - 1) / a.ranks : 1.0;
  const int cores = cal.host.shared_cores > 0 ? cal.host.shared_cores : cal.host.cores;
  const int sharing = cal.host.shared_cores > 0 ? s.hosts * local : local;
  const double turns = std::max(1.0, static_cast<double>(sharing) / std::max(1, cores)) /
                       std::max(1.0, static_cast<double>(a.ranks) / std::max(1, cores));
  return a.alpha_s + bytes * a.beta_s_per_byte * moved / measured * turns;
}

// The wire bytes per host of one allreduce of `wire` bytes, with its time.
AllreduceCost network_cost(const Calibration& cal, const Scenario& s, double bytes, double wire) {
  const int h = s.hosts, l = s.ranks_per_host, n = h * l;
  AllreduceCost c;
  if (s.path == SyncPath::kParameterServer) {
    const AlphaBeta& d = cal.algorithm("direct");
    const int k = std::max(1, s.servers);
    const double pieces = std::ceil(std::max(bytes, 1.0) / cal.engine.ps_piece_bytes);
    // Each direction at once: a worker host sends l * wire and gets as much;
    // a server takes n * wire / k (and sends as much back).
    double host_link = l * wire;
    const double server_link = static_cast<double>(n) * wire / k;
    if (!s.servers_on_own_hosts) host_link += server_link * std::ceil(static_cast<double>(k) / h);
    c.seconds = 2 * d.alpha_s + pieces / k * d.alpha_s +
                std::max(host_link, server_link) * d.beta_s_per_byte;
    c.wire_bytes_per_host = host_link;
    c.algorithm = "ps";
    return c;
  }
  const bool hier =
      s.path == SyncPath::kHierarchical && h >= 2 && l >= 2 && bytes > cal.engine.direct_bytes;
  if (hier) {
    const AlphaBeta& d = cal.algorithm("direct");
    c.algorithm = "hier";
    if (h >= 3 && wire / l >= kHierarchyRingFromBytes) {
      // A ring of the hosts per slice; the L slices' chunks share the link:
      // 2(H-1) steps of S/H bytes a host.
      c.wire_bytes_per_host = 2.0 * (h - 1) / h * wire;
      c.seconds = 2 * shm_time(cal, s, bytes) + 2.0 * (h - 1) * d.alpha_s +
                  c.wire_bytes_per_host * d.beta_s_per_byte;
      return c;
    }
    // The L slices cross the host's one link at once: S bytes per exchange.
    const int steps = doubling_steps(h);
    c.seconds = 2 * shm_time(cal, s, bytes) + steps * (d.alpha_s + wire * d.beta_s_per_byte);
    c.wire_bytes_per_host = steps * wire;
    return c;
  }
  if (n == 2 || bytes <= cal.engine.direct_bytes) {
    const AlphaBeta& d = cal.algorithm("direct");
    const int steps = doubling_steps(n);
    c.seconds = steps * (d.alpha_s + wire * d.beta_s_per_byte);
    // Exchanges between ranks of one host stay on it: a host's ranks are
    // consecutive, so the first log2(l) exchanges of a power-of-two l do.
    int local_steps = 0;
    while ((2 << local_steps) <= l && (l % (2 << local_steps)) == 0) ++local_steps;
    c.wire_bytes_per_host = static_cast<double>(l) * std::max(0, steps - local_steps) * wire;
    c.algorithm = "direct";
    return c;
  }
  const AlphaBeta& r = cal.algorithm("ring");
  c.seconds = 2.0 * (n - 1) * r.alpha_s + 2.0 * (n - 1) / n * wire * r.beta_s_per_byte;
  c.wire_bytes_per_host = 2.0 * (n - 1) / n * wire;  // one ring edge leaves each host
  c.algorithm = "ring";
  return c;
}

void check(const Calibration& cal, const Scenario& s) {
  if (s.hosts < 1 || s.ranks_per_host < 1) {
    throw_invalid_argument("hosts and ranks per host must be at least 1 (got " +
                           std::to_string(s.hosts) + " x " + std::to_string(s.ranks_per_host) +
                           ")");
  }
  if (s.path == SyncPath::kParameterServer && s.servers < 1) {
    throw_invalid_argument("a parameter-server path needs at least one server (ps:K with K >= 1)");
  }
  if (cal.profile.gradients.empty()) {
    throw_invalid_argument(
        "the calibration's profile has no gradients; profile the model (hpctrain plan calibrate "
        "--model NAME) or give --gradient-bytes");
  }
  if (cal.profile.step_s() <= 0) {
    throw_invalid_argument(
        "the calibration's profile has no compute time; profile the model or give "
        "--compute-per-sample");
  }
}

}  // namespace

SyncPath parse_path(const std::string& text, int* servers) {
  if (text == "flat") return SyncPath::kFlat;
  if (text == "hier" || text == "hierarchical") return SyncPath::kHierarchical;
  if (text == "ps" || text.rfind("ps:", 0) == 0) {
    int k = 1;
    if (text.size() > 3) {
      size_t used = 0;
      try {
        k = std::stoi(text.substr(3), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != text.size() - 3 || k < 1) {
        throw_invalid_argument(
            "sync path '" + text +
            "': the server count after ps: must be a whole number >= 1 (e.g. ps:4)");
      }
    }
    if (servers) *servers = k;
    return SyncPath::kParameterServer;
  }
  throw_invalid_argument("unknown sync path '" + text +
                         "'; choose flat, hier or ps:K (K parameter servers)");
}

std::string path_name(const Scenario& s) {
  switch (s.path) {
    case SyncPath::kFlat:
      return "flat";
    case SyncPath::kHierarchical:
      return "hier";
    case SyncPath::kParameterServer:
      return "ps:" + std::to_string(s.servers);
  }
  return "?";
}

double compression_ratio(const std::string& name) {
  if (name == "none") return 1.0;
  if (name == "fp16" || name == "bf16" || name == "auto") return 0.5;
  if (name.rfind("ratio:", 0) == 0) {
    size_t used = 0;
    double r = 0;
    try {
      r = std::stod(name.substr(6), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == name.size() - 6 && r > 0 && r <= 1) return r;
  }
  throw_invalid_argument("unknown compression '" + name +
                         "'; choose none, fp16, bf16, auto, or ratio:R for a lossy mode sending R "
                         "of the bytes (0 < R <= 1)");
}

AllreduceCost allreduce_cost(const Calibration& cal, const Scenario& s, double bytes) {
  check(cal, s);
  if (s.hosts * s.ranks_per_host == 1) return {0, 0, "none"};
  if (s.hosts == 1 && s.path != SyncPath::kParameterServer) {
    return {shm_time(cal, s, bytes), 0, "shm"};  // never compressed
  }
  const double ratio = compression_ratio(s.compression);
  const double cast = bytes * cal.engine.cast_s_per_byte;
  AllreduceCost plain = network_cost(cal, s, bytes, bytes);
  if (s.compression == "none") return plain;
  AllreduceCost packed = network_cost(cal, s, bytes, bytes * ratio);
  packed.seconds += cast;
  if (s.compression == "auto") {
    // The engine's auto: never under direct_bytes; fp16 when under 0.9x.
    if (bytes <= cal.engine.direct_bytes || packed.seconds >= 0.9 * plain.seconds) return plain;
  }
  return packed;
}

double compute_slowdown(int ranks, int threads_per_rank, int cores, double busy_factor) {
  if (ranks < 1 || threads_per_rank < 1 || cores < 1) {
    throw_invalid_argument(
        "compute slowdown: ranks, threads per rank and cores must be at least 1 "
        "(got " +
        std::to_string(ranks) + " x " + std::to_string(threads_per_rank) + " on " +
        std::to_string(cores) + ")");
  }
  const int threads = ranks * threads_per_rank;
  if (ranks == 1 || threads < cores) return 1.0;  // the calibration's own case, or cores to spare
  const int rounds = (threads + cores - 1) / cores;  // ceil: one rank's step is not split
  return rounds * busy_factor;
}

Prediction predict(const Calibration& cal, const Scenario& s) {
  check(cal, s);
  compression_ratio(s.compression);  // refuse an unknown name even on one rank
  const Profile& p = cal.profile;
  const int ranks = s.hosts * s.ranks_per_host;
  const int threads = cal.host.threads_per_rank;
  // Cores: a host's own, or the ones all hosts share (namespace hosts).
  const double slowdown =
      cal.host.shared_cores > 0
          ? compute_slowdown(ranks, threads, cal.host.shared_cores, cal.host.busy_factor)
          : compute_slowdown(s.ranks_per_host, threads, cal.host.cores, cal.host.busy_factor);
  Prediction out;
  out.scenario = s;
  out.overlap = s.ranks_per_host * threads < cal.host.cores;  // HPCT_OVERLAP=auto
  const double backward = p.backward_s * slowdown;
  out.compute_s = (p.data_s + p.forward_s + p.optimizer_s) * slowdown + backward;

  // The engine, bucket by bucket in backward order.
  double free_at = 0;  // when the previous bucket's allreduce ends (from backward's start)
  double largest = -1;
  size_t i = 0;
  const auto& g = p.gradients;
  auto ready = [&](size_t k) {
    return out.overlap ? std::min(g[k].ready_s * slowdown, backward) : backward;
  };
  while (i < g.size()) {
    const double start = std::max(free_at, ready(i) + (out.overlap ? cal.engine.cycle_s : 0.0));
    double bytes = 0;
    size_t j = i;
    while (j < g.size() && ready(j) <= start &&
           (j == i || bytes + g[j].bytes <= cal.engine.fusion_bytes)) {
      bytes += g[j].bytes;
      ++j;
    }
    if (j == i) bytes = g[j++].bytes;
    const AllreduceCost c = allreduce_cost(cal, s, bytes);
    out.sync_s += c.seconds;
    out.wire_bytes_per_host += c.wire_bytes_per_host;
    if (bytes > largest) largest = bytes, out.algorithm = c.algorithm;
    free_at = start + c.seconds;
    ++out.buckets;
    i = j;
  }
  out.exposed_sync_s = ranks > 1 ? std::max(0.0, free_at - backward) : 0.0;
  out.step_s = out.compute_s + out.exposed_sync_s;
  out.samples_per_s = ranks * p.batch / out.step_s;
  out.efficiency = out.samples_per_s / (ranks * p.batch / p.step_s());
  return out;
}

int hosts_within_efficiency(const Calibration& cal, Scenario s, double bound, int max_hosts) {
  if (!(bound > 0 && bound <= 1)) {
    throw_invalid_argument("the efficiency bound must be in (0, 1], e.g. 0.8");
  }
  for (int h = 1; h <= max_hosts; ++h) {
    s.hosts = h;
    if (predict(cal, s).efficiency < bound) return h - 1;
  }
  return max_hosts;
}

}  // namespace hpct::plan
