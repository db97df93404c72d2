#include "ringflow/framework/random.h"

#include <cmath>
#include <numbers>

namespace ringflow {

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  counter_ = 0;
}

uint64_t Generator::next_u64() {
  // SplitMix64 (Steele, Lea, Flood 2014) of seed + counter * golden gamma.
  uint64_t z = seed_ + (++counter_) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Generator::normal() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

Generator& default_generator() {
  static Generator gen(0);  // shared by all threads: pass your own Generator to threads
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ringflow
