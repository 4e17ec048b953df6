// Which elements of the parameters each rank owns under sharded data
// parallelism (DistributedOptions::shard, docs/sharding.md). Every rank
// computes the same layout from the same inputs, without communicating, and
// so can any other program (a checkpoint reader at another world size).
//
// The partition: the parameters, in the order given (DistributedOptimizer
// passes its named_parameters() in order, those with requires_grad only),
// are laid end to end as one flat vector of `total()` elements. Rank r of n
// owns the contiguous range [begin(r), end(r)) of it, where
//   begin(r) = round_down(total * r / n, kAlign)   (r > 0; begin(0) = 0)
//   end(r)   = begin(r + 1)                        (end(n - 1) = total)
// so every range holds total / n elements give or take kAlign. A parameter
// may straddle ranks: each rank then owns a piece of it (owned_pieces()).
//
// Why contiguous element ranges and not whole tensors per rank: the state a
// rank keeps is 1/n of the total whatever the layer sizes (an MLP whose three
// matrices hold nearly all elements cannot be split evenly by whole
// tensors); the ranks' updated parameters come back in one all-gather of one
// contiguous range each, straight into the flat parameter buffer; and an
// elementwise optimizer (SGD, Adam, AdamW, RMSprop, Adagrad) computes every
// element exactly as it would unsharded, so the result is bit-exact.
// kAlign keeps range starts on 64-byte boundaries.
//
// Thread-safe (immutable after construction); no libtorch needed.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hpct {

// Part of one parameter that one rank owns: elements [offset, offset+numel)
// of the parameter flattened row-major, which are elements
// [flat_offset, flat_offset+numel) of the layout's flat vector.
struct ShardPiece {
  std::string name;           // the parameter's name (named_parameters())
  std::int64_t offset = 0;    // into the flattened parameter
  std::int64_t numel = 0;     // > 0
  std::int64_t flat_offset = 0;
  std::size_t param_index = 0;  // position of the parameter in the layout
};

class ShardLayout {
 public:
  static constexpr std::int64_t kAlign = 16;  // elements (64 bytes of float32)

  ShardLayout() = default;
  // (name, numel) per parameter, in flat order; world_size >= 1.
  // InvalidArgument for a negative numel, an empty or duplicate name, or a
  // world size below 1.
  ShardLayout(std::vector<std::pair<std::string, std::int64_t>> params, int world_size);

  int world_size() const { return world_size_; }
  std::int64_t total() const { return total_; }
  const std::vector<std::pair<std::string, std::int64_t>>& params() const { return params_; }
  // Where parameter i starts in the flat vector.
  std::int64_t param_offset(std::size_t i) const { return offsets_[i]; }
  // Rank r's range of the flat vector (it may be empty when total < n * kAlign).
  std::int64_t begin(int rank) const;
  std::int64_t end(int rank) const;
  std::int64_t count(int rank) const { return end(rank) - begin(rank); }
  // Rank r's pieces, in flat order (one per parameter it touches).
  std::vector<ShardPiece> owned_pieces(int rank) const;
  // The rank that owns flat element e (0 <= e < total()).
  int owner(std::int64_t flat_element) const;

 private:
  std::vector<std::pair<std::string, std::int64_t>> params_;
  std::vector<std::int64_t> offsets_;  // size params_ + 1
  std::int64_t total_ = 0;
  int world_size_ = 1;
};

}  // namespace hpct
