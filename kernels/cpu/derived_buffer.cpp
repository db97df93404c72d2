#include "ringflow/kernels/cpu/derived_buffer.h"

#include <mutex>

#include "ringflow/kernels/cpu/dnnl_context.h"
#include "ringflow/kernels/derived_cache.h"

namespace ringflow::cpu {

struct DerivedBuffer::Entry {
  std::mutex mutex;
  uint64_t version = 0;
  bool filled = false;
  ScratchBuffer scratch;
};

DerivedBuffer::DerivedBuffer(const View& source, const std::string& key, size_t nbytes,
                             const std::function<void(void*)>& derive) {
  auto make = [&] {
    auto e = std::make_shared<Entry>();
    e->scratch = ScratchBuffer(nbytes);
    return e;
  };
  entry_ = source.derived ? std::static_pointer_cast<Entry>(source.derived->entry(key, make))
                          : make();
  std::lock_guard lock(entry_->mutex);
  if (entry_->filled && entry_->version == source.version) return;
  derive(entry_->scratch.data());
  entry_->version = source.version;
  entry_->filled = true;
}

void* DerivedBuffer::data() const { return entry_->scratch.data(); }

}  // namespace ringflow::cpu
