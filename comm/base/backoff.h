// Backoff: how a thread waits between two polls of MPI, a shared-memory channel or NCCL.
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
  // Note [backoff]: measured with bench/cluster, 2 hosts at 1 Gbit/s on 2 shared cores,
  // VGG-11 b64, one training thread per rank, ddp with 5 MB buckets. A comm thread that
  // spun and yielded between polls took the cores from backward or, losing them, moved
  // 37 MB in 550-570 ms: 725-742 ms per iteration. Sleeping 200 us between polls while
  // nobody waits: backward compute +15%, but the link kept busy (460-480 ms) and 642-669 ms
  // per iteration; 100 / 200 / 300 us in two interleaved rounds: 647-680 / 647-690 /
  // 662-686 ms. A 1 Gbit/s link moves 25 KB in 200 us,
  // well within a socket buffer. Allreduce after backward (the training thread waiting)
  // polls as hard as before: 809-826 ms per iteration either way.
  static constexpr auto kSleep = std::chrono::microseconds(200);

  int spins_;
  const Waiters* waiters_;
  int polls_ = 0;
};

}  // namespace ringflow::comm
