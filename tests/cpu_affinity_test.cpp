// Where a rank's communication thread goes (comm/base/cpu_affinity.h, train's
// --comm-thread-cpu auto): each rank's even share of the node's CPUs in rank order, the
// communication thread on the share's last core when the share has one beyond the compute
// threads; and a thread's CPUs set and read back.
#include <doctest/doctest.h>

#include <sched.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ringflow/comm/base/cpu_affinity.h"

namespace ringflow::comm {

TEST_CASE("place_comm_thread: a spare core of the rank's share, or nothing") {
  const std::vector<int> eight{0, 1, 2, 3, 4, 5, 6, 7};
  // 2 ranks, 3 compute threads: shares 0-3 and 4-7.
  ThreadPlacement p = place_comm_thread(eight, 0, 2, 3);
  CHECK(p.comm_cpu == 3);
  CHECK(p.compute_cpus == std::vector<int>{0, 1, 2});
  p = place_comm_thread(eight, 1, 2, 3);
  CHECK(p.comm_cpu == 7);
  CHECK(p.compute_cpus == std::vector<int>{4, 5, 6});
  // 4 compute threads fill a share of 4: nothing moves.
  p = place_comm_thread(eight, 1, 2, 4);
  CHECK_FALSE(p.comm_cpu.has_value());
  CHECK(p.compute_cpus.empty());
  CHECK(p.why.find("no spare core") != std::string::npos);
  // CPUs that are not 0..n-1, shares that do not divide: 3 for rank 0, 2 for rank 1.
  const std::vector<int> odd{0, 2, 4, 6, 8};
  p = place_comm_thread(odd, 0, 2, 1);
  CHECK(p.comm_cpu == 4);
  CHECK(p.compute_cpus == std::vector<int>{0, 2});
  p = place_comm_thread(odd, 1, 2, 1);
  CHECK(p.comm_cpu == 8);
  CHECK(p.compute_cpus == std::vector<int>{6});
  // One core per rank (2 ranks on 2 cores, 1 thread each): nothing moves.
  CHECK_FALSE(place_comm_thread({0, 1}, 0, 2, 1).comm_cpu.has_value());
  CHECK_THROWS_AS(place_comm_thread(eight, 2, 2, 1), std::invalid_argument);
  CHECK_THROWS_AS(place_comm_thread(eight, 0, 2, 0), std::invalid_argument);
}

TEST_CASE("cpu_list_text: ranges") {
  CHECK(cpu_list_text({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8");
  CHECK(cpu_list_text({3}) == "3");
  CHECK(cpu_list_text({}) == "none");
}

TEST_CASE("set_thread_cpus: a running thread moved and read back; a CPU refused by name") {
  const std::vector<int> mine = allowed_cpus();
  REQUIRE(!mine.empty());
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop.load()) std::this_thread::yield();
  });
  set_thread_cpus(t.native_handle(), {mine.back()}, "the test thread");
  CHECK(thread_cpus(t.native_handle()) == std::vector<int>{mine.back()});
  CHECK_THROWS_WITH_AS(set_thread_cpus(t.native_handle(), {CPU_SETSIZE}, "the test thread"),
                       doctest::Contains("the test thread: CPU 1024 is not a CPU number"),
                       std::invalid_argument);
  if (std::thread::hardware_concurrency() < CPU_SETSIZE) {  // CPU 1023 is not online
    CHECK_THROWS_WITH_AS(set_thread_cpus(t.native_handle(), {CPU_SETSIZE - 1}, "the test thread"),
                         doctest::Contains("this process may use"), std::invalid_argument);
  }
  stop = true;
  t.join();
}

}  // namespace ringflow::comm
