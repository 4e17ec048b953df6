// The response cache: decisions of earlier negotiations, so that steady-state
// training (every rank submitting the same tensors every step) skips the
// coordinator and agrees with one small bit-vector collective (controller.h).
//
// Every rank holds an identical copy: entries are only added by
// insert(), which every rank calls with the same requests in the same order
// (the executed responses of a full negotiation). A name submitted again with
// a different signature (shape, dtype, op, ...) replaces its entry at the same
// index, so indices never shift. When the cache is full new names are not
// cached (they are negotiated in full every time).
//
// Not thread-safe: the engine's background thread is its only user.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/message.h"

namespace hpct::engine {

class ResponseCache {
 public:
  explicit ResponseCache(std::size_t capacity) : capacity_(capacity) {}

  // The index of r's name when it is cached with r's signature.
  std::optional<std::size_t> lookup(const Request& r) const;
  void insert(const Request& r);
  const Request& at(std::size_t i) const { return entries_[i]; }
  std::size_t size() const { return entries_.size(); }

 private:
  std::size_t capacity_;
  std::vector<Request> entries_;
  std::unordered_map<std::string, std::size_t> by_name_;
};

}  // namespace hpct::engine
