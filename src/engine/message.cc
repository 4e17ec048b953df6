#include "engine/message.h"

#include <cstring>
#include <sstream>

namespace hpct::engine {
namespace {

class Writer {
 public:
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.append(b, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void put_dims(const std::vector<std::int64_t>& d) {
    put<std::uint32_t>(static_cast<std::uint32_t>(d.size()));
    for (auto x : d) put<std::int64_t>(x);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string get_string() {
    auto n = get<std::uint32_t>();
    need(n);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<std::int64_t> get_dims() {
    auto n = get<std::uint32_t>();
    need(static_cast<size_t>(n) * sizeof(std::int64_t));
    std::vector<std::int64_t> d(n);
    for (auto& x : d) x = get<std::int64_t>();
    return d;
  }
  void finish() const {
    if (pos_ != in_.size()) throw_data_corrupt("engine negotiation message has trailing bytes");
  }

 private:
  void need(size_t n) const {
    if (in_.size() - pos_ < n) throw_data_corrupt("engine negotiation message is truncated");
  }
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

const char* kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
  }
  return "?";
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kFp16: return "fp16";
    case Compression::kBf16: return "bf16";
    case Compression::kAuto: return "auto";
  }
  return "?";
}

Compression parse_compression(const std::string& s) {
  if (s == "none" || s.empty()) return Compression::kNone;
  if (s == "fp16" || s == "float16" || s == "half") return Compression::kFp16;
  if (s == "bf16" || s == "bfloat16") return Compression::kBf16;
  if (s == "auto") return Compression::kAuto;
  if (is_lossy_compression(s)) {
    throw_invalid_argument("compression '" + s + "' is a lossy mode that DistributedOptimizer runs " +
                           "over the engine; the engine's own wire types are none, fp16, bf16, auto");
  }
  throw_invalid_argument("compression '" + s + "' is not one of none, fp16, bf16, auto, powersgd[:RANK], int8");
}

bool is_lossy_compression(const std::string& s) {
  return s == "int8" || s == "powersgd" || s.rfind("powersgd:", 0) == 0;
}

std::size_t Request::count() const {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string Request::signature() const {
  std::ostringstream os;
  os << kind_name(kind) << " " << comm::dtype_name(dtype);
  if (kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduceScatter) {
    os << " " << comm::reduce_op_name(op) << " " << compression_name(compression);
  }
  if (kind == CollectiveKind::kBroadcast) os << " root " << root;
  os << " " << shape_string(shape);
  if (kind == CollectiveKind::kReduceScatter) os << " split " << shape_string(split);
  return os.str();
}

bool Request::same_signature(const Request& o) const {
  if (kind != o.kind || dtype != o.dtype || shape != o.shape) return false;
  const bool reduces = kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduceScatter;
  if (reduces && (op != o.op || compression != o.compression)) return false;
  if (kind == CollectiveKind::kReduceScatter && split != o.split) return false;
  return kind != CollectiveKind::kBroadcast || root == o.root;
}

std::string encode(const RequestList& l) {
  Writer w;
  w.put<std::uint8_t>(l.shutdown);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(l.requests.size()));
  for (const auto& r : l.requests) {
    w.put_string(r.name);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.kind));
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.dtype));
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.op));
    w.put<std::int32_t>(r.root);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.compression));
    w.put_dims(r.shape);
    w.put_dims(r.split);
    w.put<std::int64_t>(r.waited_ms);
  }
  return w.take();
}

RequestList decode_requests(const std::string& bytes) {
  Reader rd(bytes);
  RequestList l;
  l.shutdown = rd.get<std::uint8_t>() != 0;
  auto n = rd.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < n; ++i) {
    Request r;
    r.name = rd.get_string();
    r.kind = static_cast<CollectiveKind>(rd.get<std::uint8_t>());
    r.dtype = static_cast<comm::DataType>(rd.get<std::uint8_t>());
    r.op = static_cast<comm::ReduceOp>(rd.get<std::uint8_t>());
    r.root = rd.get<std::int32_t>();
    r.compression = static_cast<Compression>(rd.get<std::uint8_t>());
    r.shape = rd.get_dims();
    r.split = rd.get_dims();
    r.waited_ms = rd.get<std::int64_t>();
    l.requests.push_back(std::move(r));
  }
  rd.finish();
  return l;
}

std::string encode(const ResponseList& l) {
  Writer w;
  w.put<std::uint8_t>(l.shutdown);
  w.put<std::int32_t>(l.shutdown_rank);
  w.put<std::uint8_t>(l.pending);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(l.responses.size()));
  for (const auto& r : l.responses) {
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.type));
    w.put<std::uint32_t>(static_cast<std::uint32_t>(r.names.size()));
    for (const auto& n : r.names) w.put_string(n);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.dtype));
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.op));
    w.put<std::int32_t>(r.root);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.compression));
    w.put_dims(r.first_dims);
    w.put<std::uint8_t>(static_cast<std::uint8_t>(r.error_code));
    w.put_string(r.error);
  }
  return w.take();
}

ResponseList decode_responses(const std::string& bytes) {
  Reader rd(bytes);
  ResponseList l;
  l.shutdown = rd.get<std::uint8_t>() != 0;
  l.shutdown_rank = rd.get<std::int32_t>();
  l.pending = rd.get<std::uint8_t>() != 0;
  auto n = rd.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < n; ++i) {
    Response r;
    r.type = static_cast<Response::Type>(rd.get<std::uint8_t>());
    auto k = rd.get<std::uint32_t>();
    for (std::uint32_t j = 0; j < k; ++j) r.names.push_back(rd.get_string());
    r.dtype = static_cast<comm::DataType>(rd.get<std::uint8_t>());
    r.op = static_cast<comm::ReduceOp>(rd.get<std::uint8_t>());
    r.root = rd.get<std::int32_t>();
    r.compression = static_cast<Compression>(rd.get<std::uint8_t>());
    r.first_dims = rd.get_dims();
    r.error_code = static_cast<ErrorCode>(rd.get<std::uint8_t>());
    r.error = rd.get_string();
    l.responses.push_back(std::move(r));
  }
  rd.finish();
  return l;
}

}  // namespace hpct::engine
