#include "ringflow/comm/base/scratch.h"

#include <exception>
#include <fstream>
#include <memory>
#include <new>
#include <string>

namespace ringflow::comm::detail {
namespace {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t{64}); }
};

}  // namespace

void* scratch(size_t bytes) {
  thread_local std::unique_ptr<void, AlignedFree> buffer;
  thread_local size_t capacity = 0;
  if (bytes > capacity) {
    buffer.reset();
    capacity = 0;
    const size_t grown = bytes < 4096 ? 4096 : bytes;
    buffer.reset(::operator new(grown, std::align_val_t{64}));
    capacity = grown;
  }
  return buffer.get();
}

// The last-level cache from sysfs (sysconf(_SC_LEVEL3_CACHE_SIZE) says 256 MiB on this
// VM, whose one L3 slice is 32 MiB), 0 where unknown.
size_t last_level_cache_bytes() {
  size_t bytes = 0;
  int level = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int l = 0;
    std::string size;
    if (!(level_file >> l) || !(size_file >> size) || size.empty() || l < level) continue;
    size_t value = 0;
    try {
      value = std::stoull(size);
    } catch (const std::exception&) {
      continue;
    }
    const char unit = size.back();
    value *= unit == 'K' ? size_t{1} << 10 : unit == 'M' ? size_t{1} << 20 : 1;
    level = l;
    bytes = value;
  }
  return bytes;
}

size_t streaming_from_bytes() {
  static const size_t bytes = [] {
    const size_t cache = last_level_cache_bytes();
    return cache > 0 ? cache / 2 : size_t{16} << 20;
  }();
  return bytes;
}

}  // namespace ringflow::comm::detail
