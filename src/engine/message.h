// What ranks tell the coordinator (Request) and what it answers (Response),
// and their byte encoding for the negotiation collectives (controller.h).
//
// Plain values, no threads. Encoding is little-endian fixed-width fields and
// length-prefixed strings; every rank runs the same binary, so there is no
// versioning. A truncated or overlong buffer raises DataCorrupt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/types.h"
#include "core/error.h"

namespace hpct::engine {

enum class CollectiveKind : std::uint8_t { kAllreduce, kAllgather, kBroadcast, kReduceScatter };
// The wire type of a float32 allreduce: cast before the collective, back after.
// kAuto: the engine decides per allreduce size by measuring (auto_compression.h).
enum class Compression : std::uint8_t { kNone, kFp16, kBf16, kAuto };

const char* kind_name(CollectiveKind k);
const char* compression_name(Compression c);
Compression parse_compression(const std::string& s);  // none | fp16 | bf16 | auto
// powersgd[:RANK] or int8: lossy modes with error feedback that
// DistributedOptimizer runs on top of the engine (src/torch/
// gradient_compressor.h); the engine's own wire type under them is auto.
bool is_lossy_compression(const std::string& s);

// One named tensor that one rank has submitted.
struct Request {
  std::string name;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  comm::DataType dtype = comm::DataType::kFloat32;
  comm::ReduceOp op = comm::ReduceOp::kSum;  // allreduce and reduce-scatter
  int root = 0;                              // broadcast only
  Compression compression = Compression::kNone;  // allreduce and reduce-scatter
  std::vector<std::int64_t> shape;
  // Reduce-scatter only: size + 1 element offsets into the tensor; rank p
  // keeps [split[p], split[p + 1]).
  std::vector<std::int64_t> split;
  std::int64_t waited_ms = 0;  // how long the rank had held it when it reported it

  std::size_t count() const;  // elements: product of shape
  // Everything the ranks must agree on, except the name ("allreduce float32
  // sum none [4096,784]"; a reduce-scatter adds "split [0, 5, 9]"); the
  // response cache's key with the name.
  std::string signature() const;
  // signature() == other.signature(), without formatting either (the
  // response cache asks this for every tensor of every step).
  bool same_signature(const Request& other) const;
};

std::string shape_string(const std::vector<std::int64_t>& shape);  // "[4096, 784]"

// One decision of the coordinator, executed by every rank in list order.
struct Response {
  enum class Type : std::uint8_t { kAllreduce, kAllgather, kBroadcast, kError, kReduceScatter };
  Type type = Type::kAllreduce;
  std::vector<std::string> names;  // several only for a fused allreduce or reduce-scatter
  comm::DataType dtype = comm::DataType::kFloat32;
  comm::ReduceOp op = comm::ReduceOp::kSum;
  int root = 0;
  Compression compression = Compression::kNone;
  std::vector<std::int64_t> first_dims;  // allgather: every rank's first dimension
  ErrorCode error_code = ErrorCode::kMismatch;  // kError only
  std::string error;                            // kError only
};

struct RequestList {
  std::vector<Request> requests;
  bool shutdown = false;
};

struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;
  int shutdown_rank = -1;  // lowest rank that asked for the shutdown
  // The coordinator still holds requests that are not ready on every rank:
  // every rank keeps negotiating every cycle (it may be the one missing).
  bool pending = false;
};

std::string encode(const RequestList& l);
RequestList decode_requests(const std::string& bytes);
std::string encode(const ResponseList& l);
ResponseList decode_responses(const std::string& bytes);

}  // namespace hpct::engine
