#include "ringflow/comm/group/work.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "ringflow/framework/error.h"

namespace ringflow::comm {

Work::Work(std::string description, std::shared_ptr<Waiters> waiters)
    : description_(std::move(description)), waiters_(std::move(waiters)) {}

namespace {

// A collective of a few KB completes within microseconds of being queued: spinning that
// long before sleeping on the condition variable saves two context switches per wait,
// which dominate small-message latency when the cores are shared.
constexpr auto kSpin = std::chrono::microseconds(30);

}  // namespace

void Work::wait() {
  const Waiters::Scope waiting(waiters_.get());
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!done_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();  // lets the comm thread have this core when cores are shared
  }
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [&] { return completed_; });
  if (error_) std::rethrow_exception(error_);
}

void Work::wait(Timeout timeout) {
  const Waiters::Scope waiting(waiters_.get());
  std::unique_lock lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    throw CommError(cat(description_, " did not complete within ", timeout.count(),
                        " ms of wait(); still ", status_));
  }
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  std::lock_guard lock(mutex_);
  return completed_;
}

// Both ask is_completed() first: a backend may only find out there (NCCL polls an event).
bool Work::is_success() const {
  if (!is_completed()) return false;
  std::lock_guard lock(mutex_);
  return !error_;
}

std::exception_ptr Work::exception() const {
  is_completed();
  std::lock_guard lock(mutex_);
  return error_;
}

std::string Work::status() const {
  std::lock_guard lock(mutex_);
  return status_;
}

Work::Clock::time_point Work::start_time() const {
  std::lock_guard lock(mutex_);
  return start_time_;
}

Work::Clock::time_point Work::end_time() const {
  std::lock_guard lock(mutex_);
  return end_time_;
}

Traffic Work::traffic() const {
  std::lock_guard lock(mutex_);
  return traffic_;
}

void Work::mark_started() {
  std::lock_guard lock(mutex_);
  start_time_ = Clock::now();
}

void Work::set_traffic(Traffic traffic) {
  std::lock_guard lock(mutex_);
  traffic_ = traffic;
}

void Work::set_status(std::string status) {
  std::lock_guard lock(mutex_);
  status_ = std::move(status);
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (completed_) return;
    completed_ = true;
    end_time_ = Clock::now();
    if (start_time_ == Clock::time_point{}) start_time_ = end_time_;
    done_.store(true, std::memory_order_release);
    error_ = std::move(error);
    status_ = error_ ? "failed" : "done";
  }
  done_cv_.notify_all();
}

}  // namespace ringflow::comm
