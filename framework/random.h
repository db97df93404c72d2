// Seeded random numbers for initialisation, dropout and shuffling. A Generator is a small
// explicit object (pass one where reproducibility matters); default_generator() serves
// callers that pass none (it is not thread-safe). Sequences are the same on every machine
// and build.
#pragma once

#include <cstdint>

namespace ringflow {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t seed() const { return seed_; }

  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits
  double normal();   // standard normal (Box-Muller)
  // State for checkpoints: the whole generator is (seed, counter).
  uint64_t counter() const { return counter_; }
  void set_counter(uint64_t counter) { counter_ = counter; }

 private:
  uint64_t seed_ = 0;
  uint64_t counter_ = 0;  // SplitMix64 over (seed, counter): cheap to save and restore
};

Generator& default_generator();
void manual_seed(uint64_t seed);  // reseeds default_generator()

}  // namespace ringflow
