// Data a kernel derives from a tensor's memory and may reuse while that memory is unchanged
// (weights reordered into oneDNN's layout). Each Storage owns one, so what was derived from
// it is freed with it: a process-wide table keyed by addresses kept the reorders of every
// short-lived tensor (autocast's 16-bit weights, one set per step) for ever.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ringflow {

class DerivedCache {
 public:
  DerivedCache() = default;
  ~DerivedCache();
  DerivedCache(const DerivedCache&) = delete;
  DerivedCache& operator=(const DerivedCache&) = delete;

  // The entry under `key`, made by make() on first use. The entry is the caller's to fill
  // and to check against the memory's version (View::version).
  std::shared_ptr<void> entry(const std::string& key,
                              const std::function<std::shared_ptr<void>()>& make);

  // Entries held by every DerivedCache of the process (for tests).
  static size_t live_entries();

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<void>> entries_;
};

}  // namespace ringflow
