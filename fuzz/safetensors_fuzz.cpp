// libFuzzer target: load_safetensors (framework/serialize.h) on arbitrary bytes.
#include <exception>

#include "ringflow/framework/serialize.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ringflow::fuzz::FuzzInput input(data, size);
  try {
    const ringflow::SafetensorsFile f = ringflow::load_safetensors(input.path());
    for (const auto& [name, t] : f.tensors) (void)t.numel();
  } catch (const std::exception&) {
  }
  return 0;
}
