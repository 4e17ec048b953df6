#include "engine/fusion.h"

#include <cstdlib>
#include <map>
#include <new>
#include <tuple>

namespace hpct::engine {

std::size_t wire_element_size(const Request& r) {
  // kAuto counts as float32: what it decides is not known when fusing.
  if (r.dtype == comm::DataType::kFloat32 && r.compression != Compression::kNone &&
      r.compression != Compression::kAuto) {
    return 2;
  }
  return comm::dtype_size(r.dtype);
}

std::vector<Response> plan_fusion(const std::vector<const Request*>& ready, std::size_t threshold) {
  std::vector<Response> out;
  // Open group per (dtype, op, compression): its index in out and its bytes.
  std::map<std::tuple<int, int, int, int>, std::pair<std::size_t, std::size_t>> open;
  for (const Request* r : ready) {
    if (r->kind == CollectiveKind::kBroadcast) {
      Response b;
      b.type = Response::Type::kBroadcast;
      b.names = {r->name};
      b.dtype = r->dtype;
      b.root = r->root;
      out.push_back(std::move(b));
      continue;
    }
    // Allgathers are planned by the coordinator (they need every rank's shape).
    const bool scatter = r->kind == CollectiveKind::kReduceScatter;
    if (r->kind != CollectiveKind::kAllreduce && !scatter) continue;
    std::size_t bytes = r->count() * wire_element_size(*r);
    auto key = std::make_tuple(static_cast<int>(r->kind), static_cast<int>(r->dtype), static_cast<int>(r->op),
                               static_cast<int>(r->compression));
    auto it = open.find(key);
    if (it != open.end() && it->second.second + bytes <= threshold) {
      out[it->second.first].names.push_back(r->name);
      it->second.second += bytes;
      continue;
    }
    Response a;
    a.type = scatter ? Response::Type::kReduceScatter : Response::Type::kAllreduce;
    a.names = {r->name};
    a.dtype = r->dtype;
    a.op = r->op;
    a.compression = r->compression;
    out.push_back(std::move(a));
    // A tensor over the threshold travels alone and leaves the open group open.
    if (bytes <= threshold) open[key] = {out.size() - 1, bytes};
  }
  return out;
}

void FusionBuffer::Free::operator()(void* p) const { std::free(p); }

void* FusionBuffer::reserve(std::size_t bytes) {
  if (bytes <= capacity_ && data_) return data_.get();
  std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(p);
  capacity_ = rounded;
  return p;
}

}  // namespace hpct::engine
