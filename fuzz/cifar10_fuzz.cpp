// libFuzzer target: the CIFAR-10 reader (framework/data/cifar10.h) on arbitrary bytes, with
// any record count per file.
#include <exception>

#include "ringflow/framework/data/cifar10.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ringflow::fuzz::FuzzInput input(data, size);
  try {
    const ringflow::data::Cifar10 set({input.path()}, /*records_per_file=*/0);
    if (set.size() > 0) (void)set.get(set.size() - 1);
  } catch (const std::exception&) {
  }
  return 0;
}
