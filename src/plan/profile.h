// The 1-rank profile behind `hpctrain plan calibrate`: one built-in model
// (train/models.h) trained alone on one core for a few steps, timed by part
// (data, forward, backward, optimizer), with the moment backward produced
// each gradient (a hook per parameter), in the order it produced them.
// The data is Fashion-MNIST's training set in memory, as bench train reads
// it (Debian's dataset-fashion-mnist): the data part is the same batch
// gathering (index_select).
#pragma once

#include <string>

#include "plan/calibration.h"

namespace hpct::plan {

struct ProfileOptions {
  std::string model = "mlp";
  int batch = 64;
  int threads = 1;  // intra-op threads, as each rank of a job has
  int warmup = 3;
  int steps = 10;        // timed; each part is the median over them
  std::string data_dir;  // empty: Debian's fashion-mnist directory
};

// Blocks for the run (seconds for the built-in models). InvalidArgument for
// an unknown model or steps < 1.
Profile profile_model(const ProfileOptions& o);

}  // namespace hpct::plan
