// Backoff: how a thread waits between two polls of MPI or NCCL, which have nothing to sleep
// on (ShmTransport sleeps on a futex, TcpTransport in poll()).
// MPI moves data only while polled, and a polling thread takes a core: so a process
// group's communication thread polls hard (spins, then yields) while some thread waits for
// one of the group's collectives, and sleeps between polls while nobody does, when the
// computation it overlaps with needs the cores. See Note [backoff]. Any other thread (one
// that runs an algorithm itself, as the benchmarks do, or waits for NCCL) spins, then
// yields: it has nothing else to do, and a yield leaves the core to any other runnable
// thread. Waiters is the count that tells the two apart: the group owns one, its Works
// count the threads blocked in wait() in it, and its comm thread and transports read it.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace ringflow::comm {

class Waiters {
 public:
  int count() const { return count_.load(std::memory_order_relaxed); }

  // Counts the calling thread while it lives.
  class Scope {
   public:
    explicit Scope(Waiters* waiters) : waiters_(waiters) {
      if (waiters_) waiters_->count_.fetch_add(1, std::memory_order_relaxed);
    }
    ~Scope() {
      if (waiters_) waiters_->count_.fetch_sub(1, std::memory_order_relaxed);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Waiters* waiters_;
  };

 private:
  std::atomic<int> count_{0};
};

class Backoff {
 public:
  // spins: polls in a row, while someone waits, before yielding between polls (small
  // messages complete within microseconds). waiters: the threads this one polls for (a
  // communication thread's group's); nullptr when the calling thread waits itself.
  explicit Backoff(int spins, const Waiters* waiters = nullptr)
      : spins_(spins), waiters_(waiters) {}

  // Call after each poll that did not finish the wait.
  void pause() {
    if (waiters_ && waiters_->count() == 0) {
      std::this_thread::sleep_for(kSleep);  // the result is not needed yet
    } else if (++polls_ > spins_) {
      std::this_thread::yield();
    }
  }

 private:
  // Note [backoff]: a comm thread that spins and yields between polls while ddp overlaps
  // backward takes the cores from backward or, losing them, leaves the link idle; sleeping
  // between polls while nobody waits keeps the link busy at a small cost to backward, and
  // 200 us did as well as 100 or 300 (a 1 Gbit/s link moves 25 KB in 200 us, well within a
  // socket buffer). A thread waiting for the collective makes it poll as hard as before.
  // Measured on bench/cluster: docs/emulated-cluster.md, "The communication thread's polling".
  static constexpr auto kSleep = std::chrono::microseconds(200);

  int spins_;
  const Waiters* waiters_;
  int polls_ = 0;
};

}  // namespace ringflow::comm
