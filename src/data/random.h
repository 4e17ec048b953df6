// A small deterministic random generator (SplitMix64) for shuffles, splits
// and augmentations. Chosen over <random> distributions because those are
// implementation-defined: ranks, servers and resumed runs must draw the
// same numbers from the same seed whatever library built them.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace hpct::data {

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : state_(seed) {}
  // A generator seeded from several values (seed, epoch, rank, ...).
  static Rng from(std::initializer_list<std::uint64_t> parts) {
    std::uint64_t s = 0x243f6a8885a308d3ull;
    for (auto p : parts) s = mix(s ^ mix(p + 0x9e3779b97f4a7c15ull));
    return Rng(s);
  }
  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ull;
    return mix(state_);
  }
  // Uniform in [0, n) for n > 0, without modulo bias (rejection).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
    std::uint64_t v;
    do v = next();
    while (v >= limit);
    return v % n;
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  std::uint64_t state() const { return state_; }

  static std::uint64_t mix(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_;
};

}  // namespace hpct::data
