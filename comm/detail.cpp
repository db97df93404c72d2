#include "comm/detail.h"

#include <memory>
#include <new>

#include "framework/error.h"

namespace ringflow::comm::detail {
namespace {

struct AlignedFree {
  void operator()(void* p) const { ::operator delete(p, std::align_val_t{64}); }
};

}  // namespace

void check_args(const char* algorithm, const Transport& t, Buffer buf, int root) {
  RF_CHECK(buf.count >= 0, algorithm, " allreduce: negative count ", buf.count);
  RF_CHECK(buf.count == 0 || buf.data != nullptr, algorithm,
           " allreduce: null buffer with count ", buf.count);
  RF_CHECK(root >= 0 && root < t.size(), algorithm, " allreduce: root ", root,
           " outside the group of ", t.size(), " ranks");
}

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

}  // namespace ringflow::comm::detail
