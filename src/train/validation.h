// The validation phase of the training loop (trainer.cc): batch-norm
// statistics averaged over ranks, loss and accuracy on the validation
// shards, and the final check that every rank holds the same parameters.
// Each function is a collective: every rank calls it at the same point.
// Internal to train/.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "hpctrain/hpctrain.h"
#include "train/models.h"

namespace hpct::train {

// The validation loader beside a training loader: the same decoding on
// `shards`, every sample once (no shuffle, the last partial batch kept),
// rank's part of size ranks. Null when shards is empty (no --val).
std::unique_ptr<data::Loader> open_validation_loader(const data::LoaderOptions& train,
                                                     const std::vector<std::string>& shards, int rank, int size);

// CRC-32C over every parameter and buffer, in module order.
std::uint32_t model_checksum(Model& model);

// Batch-norm statistics (and any other buffer) averaged over ranks, so
// every rank evaluates and saves the same model. Parameters are left alone:
// they are identical already, and the final check proves it.
void average_buffers(Context& ctx, Model& model);

// Loss and accuracy on the validation shards, summed over every rank's part
// (a collective: every rank calls it at the same point). Leaves the model in
// training mode.
void validate(Context& ctx, Model& model, const std::string& name, data::Loader& val, double* loss,
              double* accuracy);

// The parameters at the end of a run: buffers averaged, then rank 0's
// checksum (8 hex digits) and whether every rank's is the same.
struct ParameterCheck {
  std::string crc_hex;
  bool identical = false;
};
ParameterCheck check_parameters(Context& ctx, Model& model);

}  // namespace hpct::train
