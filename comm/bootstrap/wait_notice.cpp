#include "ringflow/comm/bootstrap/wait_notice.h"

#include <algorithm>
#include <cstdio>

#include "ringflow/framework/error.h"

namespace ringflow::comm::detail {

WaitNotice::WaitNotice(std::string who, std::chrono::milliseconds timeout)
    : who_(std::move(who)), timeout_(timeout), start_(Clock::now()), next_(start_ + kFirst) {}

WaitNotice::Clock::time_point WaitNotice::until(Clock::time_point deadline) const {
  return std::min(deadline, next_);
}

void WaitNotice::due(const std::function<std::string()>& what) {
  const auto now = Clock::now();
  if (now < next_) return;
  const auto waited = std::chrono::duration_cast<std::chrono::seconds>(now - start_);
  const std::string line = cat("ringflow: ", who_, ": waiting ", waited.count(), " s (timeout ",
                               timeout_.count() / 1000.0, " s) for ", what(), "\n");
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  while (next_ <= now) next_ += kEvery;
}

}  // namespace ringflow::comm::detail
