// libFuzzer target: the tar reader of WebDataset shards (framework/data/tar.h) on arbitrary
// bytes: every member read, then the file again with only the .cls members read.
#include <exception>

#include "ringflow/framework/data/tar.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ringflow::fuzz::FuzzInput input(data, size);
  for (bool everything : {true, false}) {
    try {
      ringflow::data::TarReader tar(input.path());
      ringflow::data::TarMember member;
      const auto want = [everything](const std::string& name) {
        return everything || (name.size() >= 4 && name.compare(name.size() - 4, 4, ".cls") == 0);
      };
      for (int n = 0; n < 10000 && tar.next(member, want); ++n) {
      }
    } catch (const std::exception&) {
    }
  }
  return 0;
}
