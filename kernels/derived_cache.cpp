#include "ringflow/kernels/derived_cache.h"

#include <atomic>

namespace ringflow {
namespace {
std::atomic<size_t> g_live_entries{0};
}  // namespace

DerivedCache::~DerivedCache() {
  if (!entries_.empty()) g_live_entries.fetch_sub(entries_.size());
}

std::shared_ptr<void> DerivedCache::entry(const std::string& key,
                                          const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  std::shared_ptr<void> e = make();
  entries_.emplace(key, e);
  g_live_entries.fetch_add(1);
  return e;
}

size_t DerivedCache::live_entries() { return g_live_entries.load(); }

}  // namespace ringflow
