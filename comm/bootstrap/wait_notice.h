// Internal to comm/bootstrap (not installed): what a rank says on stderr while it waits at
// start-up for ranks, or a store, that are not there yet, so that a rank started alone is not
// silent until its timeout. First after 5 s (a normal start meets well within it), then
// every 10 s.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace ringflow::comm::detail {

class WaitNotice {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirst{5000}, kEvery{10000};

  // who: "rank 0 of 2"; timeout: the whole wait's bound, which each line repeats.
  WaitNotice(std::string who, std::chrono::milliseconds timeout);

  // The sooner of `deadline` and the next line's time: how long a wait may block before it
  // calls due().
  Clock::time_point until(Clock::time_point deadline) const;
  // Once a line is due: "ringflow: <who>: waiting <s> s (timeout <t> s) for <what()>".
  void due(const std::function<std::string()>& what);

 private:
  std::string who_;
  std::chrono::milliseconds timeout_;
  Clock::time_point start_, next_;
};

}  // namespace ringflow::comm::detail
