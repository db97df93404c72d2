// Work: the handle an asynchronous collective returns. The communication thread that runs
// the collective completes it (finish), or a backend's subclass finds out when asked (wait
// and is_completed are virtual); any thread may wait on it, poll it or read its error. Thread-safe. The description names the collective and its sequence number
// ("allreduce #5 (f32, 1000 elements)"); the status says what it is waiting for, so that a
// wait that runs out of time can say what is missing.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "ringflow/comm/base/backoff.h"
#include "ringflow/comm/base/traffic.h"
#include "ringflow/comm/base/types.h"

namespace ringflow::comm {

// A collective that failed: timed out, mismatched across ranks (checking mode), or an
// error of the backend. The message names the collective, its sequence number and, where
// knowable, the ranks that did not arrive.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Work {
 public:
  // waiters: the group's count of threads blocked in wait() (comm/base/backoff.h), which
  // its communication thread reads to decide how hard to poll; null for none.
  explicit Work(std::string description, std::shared_ptr<Waiters> waiters = nullptr);
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the collective completes; rethrows its error if it failed.
  virtual void wait();
  // As wait(), but throws CommError naming the collective and what it is still waiting
  // for when it has not completed within `timeout`. The collective itself goes on (its
  // own deadline is CollectiveOptions::timeout).
  virtual void wait(Timeout timeout);
  // True once the collective has finished, successfully or not. Never blocks.
  virtual bool is_completed() const;
  // True once finished without error.
  bool is_success() const;
  // The error it failed with, or null (also while still running).
  std::exception_ptr exception() const;

  const std::string& description() const { return description_; }
  std::string status() const;  // "queued", "waiting for ranks 2, 3", "done", ...

  // What the collective cost this rank, for DDP's and the training app's measurements:
  // when the communication thread started and finished running it (a default time_point
  // until then), and the bytes it sent and received (comm/base/traffic.h; zero where the
  // backend does not say). Read them once the Work has completed.
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_time() const;
  Clock::time_point end_time() const;
  Traffic traffic() const;

  // --- for the backend's communication thread
  void set_status(std::string status);
  void mark_started();  // the collective leaves the queue
  void set_traffic(Traffic traffic);
  void finish(std::exception_ptr error = nullptr);  // once; wakes every waiter

 private:
  const std::string description_;
  const std::shared_ptr<Waiters> waiters_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool completed_ = false;
  std::atomic<bool> done_{false};  // completed_, readable without the lock (wait's spin)
  std::exception_ptr error_;
  std::string status_ = "queued";
  Clock::time_point start_time_{}, end_time_{};
  Traffic traffic_;
};

}  // namespace ringflow::comm
