// Data a CPU kernel derives from a tensor's memory (weights reordered for oneDNN, or
// transformed for Winograd), kept in the memory's DerivedCache and derived again only when
// its version changes (Note [weight cache] in dnnl_context.h).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "ringflow/kernels/view.h"

namespace ringflow::cpu {

class DerivedBuffer {
 public:
  // nbytes under `key` in source's DerivedCache (a fresh buffer each call where source has
  // none), filled by derive(data) unless it holds what source's current version gave.
  DerivedBuffer(const View& source, const std::string& key, size_t nbytes,
                const std::function<void(void* data)>& derive);
  void* data() const;

 private:
  struct Entry;
  std::shared_ptr<Entry> entry_;
};

}  // namespace ringflow::cpu
