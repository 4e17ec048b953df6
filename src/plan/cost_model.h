// `hpctrain plan`'s cost model: the time of one data-parallel training step
// on H hosts with L ranks each, in the alpha-beta form of collective
// algorithms (a message of S bytes costs alpha + S * beta), for every sync
// path hpctrain has and every wire compression.
//
// What a step is, per rank (the slowest rank sets the pace, all are alike):
//   data + forward + backward + exposed sync + optimizer
// Gradients become ready during backward in backward order (the profile's
// ready times). The engine fuses the ones ready within one cycle into a
// bucket (at most fusion_bytes) and allreduces it while backward goes on, one
// bucket after the other; the sync that shows is what runs past the end of
// backward. Without overlap (HPCT_OVERLAP=auto turns it off when a host's
// ranks fill its cores) every bucket waits for the end of backward.
//
// One allreduce of S bytes, N = H * L ranks (calibration.h holds alpha and
// beta per algorithm):
//   shared memory, one host:   alpha_shm + S * beta_shm * b(L) / b(L_cal) * t,
//                              b(L) = 2(L-1)/L, the bytes each rank moves;
//                              t = max(1, R/C) / max(1, L_cal/C), the turns
//                              of R ranks on C cores (R = L, or H * L when
//                              the hosts share C cores: every host's step
//                              runs at once)
//   direct (recursive doubling), N = 2 or S <= direct_bytes:
//                              steps(N) * (alpha_d + S * beta_d),
//                              steps(N) = log2 p + (N > p ? 2 : 0), p the
//                              largest power of two <= N (fold in and out)
//   ring (Gloo's), otherwise:  2(N-1) * alpha_r + 2(N-1)/N * S * beta_r
//   hierarchical (H, L >= 2, S > direct_bytes): shared memory, then local
//                              rank l of every host allreduces slice l
//                              (S/L bytes) over direct connections, the L
//                              slices at once through one host link, then
//                              shared memory again:
//                              2 * shm(S, L) + steps(H) * (alpha_d + S * beta_d);
//                              3 or more hosts with slices of 256 KiB and
//                              more take a ring of the hosts instead:
//                              2 * shm(S, L) + 2(H-1) * alpha_d
//                                            + 2(H-1)/H * S * beta_d
//   parameter servers (K):     every worker pushes and pulls S (both ways at
//                              once); each server takes W*S/K from the
//                              workers and sends as much back; the busiest
//                              link sets the time: 2 * alpha_d + ceil(S /
//                              piece) / K * alpha_d + max(host link, server
//                              link) * beta_d.
// Compute on cores that ranks share (compute_slowdown): R ranks of T
// threads on C cores (a host's own, or the machine's that namespace hosts
// share). A synchronous step ends when the last rank's compute ends, and one
// rank's step is not split across cores: the core that holds the most ranks
// finishes last, so compute takes ceil(R T / C) times one rank's alone, not
// R T / C (3 ranks on 2 cores: 2x; the core with one rank idles half the
// step, and that rank's sync shows the wait). Once the ranks fill the
// cores (R T >= C), every core is busy and each computes slower than one
// core alone (memory bandwidth, caches, a VM's vCPUs): busy_factor, measured
// by calibration as a rank's step with the host's cores all running ranks
// over its step alone (calibration.h, all_cores_factor). One rank, or ranks
// that leave cores free: 1.
// Compression to 16 bits halves the bytes on the wire (a lossy mode: its
// bytes ratio) and adds the casts there and back (cast_s_per_byte of the
// float32 bytes) on the rank's own core; "auto" takes the faster of none and
// fp16 per bucket and never compresses in shared memory or under
// direct_bytes, as the engine's auto does.
//
// Not modelled: the CPU that moving bytes takes from compute when a host's
// ranks fill its cores (except as calibrated into beta and busy_factor),
// stragglers, and the data loader's wait (the profile's data time is taken
// as is).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/calibration.h"

namespace hpct::plan {

enum class SyncPath { kFlat, kHierarchical, kParameterServer };

// What to predict: one cluster shape with one sync path and compression.
struct Scenario {
  int hosts = 1;
  int ranks_per_host = 1;
  SyncPath path = SyncPath::kFlat;
  int servers = 1;                    // parameter servers (kParameterServer)
  bool servers_on_own_hosts = false;  // else placed on the workers' hosts
  std::string compression = "none";   // none, fp16, bf16, auto, or ratio:R
};

struct Prediction {
  Scenario scenario;
  std::string algorithm;      // what the largest bucket took: shm, direct, ring, hier, ps
  double compute_s = 0;       // data + forward + backward + optimizer, per step
  double sync_s = 0;          // all allreduce time, per step
  double exposed_sync_s = 0;  // the part of sync_s that does not hide behind backward
  double step_s = 0;
  double samples_per_s = 0;
  double efficiency = 0;           // samples_per_s / (ranks * one rank's samples/s)
  double wire_bytes_per_host = 0;  // bytes a host sends over its link per step
  int buckets = 0;
  bool overlap = false;
};

// The path names the CLI takes: flat, hier (or hierarchical), ps:K (ps = ps:1).
SyncPath parse_path(const std::string& text, int* servers);
std::string path_name(const Scenario& s);
// The bytes ratio of a compression name; throws InvalidArgument naming the
// choices for anything else. "auto" gives 0.5 (its fp16 choice).
double compression_ratio(const std::string& name);

// Throws InvalidArgument naming the problem when the calibration or the
// scenario cannot be predicted (no gradients, a missing algorithm, hosts < 1).
Prediction predict(const Calibration& cal, const Scenario& s);

// One allreduce of `bytes` float32 bytes (before compression) in scenario s,
// with no overlap: its time and what carried it. Exposed for tests and for
// the table of per-size costs.
struct AllreduceCost {
  double seconds = 0;
  double wire_bytes_per_host = 0;
  std::string algorithm;
};
AllreduceCost allreduce_cost(const Calibration& cal, const Scenario& s, double bytes);

// How much longer a step's compute takes than one rank's alone when `ranks`
// ranks of `threads_per_rank` threads run on `cores` cores: 1 for one rank
// or while cores are left free, else ceil(ranks x threads / cores) x
// busy_factor (the header comment). InvalidArgument for counts below 1.
double compute_slowdown(int ranks, int threads_per_rank, int cores, double busy_factor);

// The largest host count h in [1, max_hosts] such that every host count from
// 1 to h keeps efficiency >= bound (the point past which adding hosts stops
// paying); 0 when even one host is below it. The scenario's hosts is ignored.
int hosts_within_efficiency(const Calibration& cal, Scenario s, double bound, int max_hosts);

}  // namespace hpct::plan
