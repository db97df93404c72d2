// libFuzzer target: read_idx (framework/data/idx.h) on arbitrary bytes, plain or gzip.
#include <exception>

#include "ringflow/framework/data/idx.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ringflow::fuzz::FuzzInput input(data, size);
  try {
    (void)ringflow::data::read_idx(input.path());
  } catch (const std::exception&) {
  }
  return 0;
}
