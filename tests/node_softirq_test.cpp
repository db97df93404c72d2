// The node's softirq time (apps/node_softirq.h): /proc/stat's format as proc(5) documents it,
// and the live counter.
#include <doctest/doctest.h>

#include <chrono>

#include "ringflow/apps/node_softirq.h"

namespace ringflow::apps {
namespace {

using std::chrono::milliseconds;

// proc(5): "cpu" then user nice system idle iowait irq softirq steal guest guest_nice, in
// units of USER_HZ; the per-CPU lines follow and are not summed again.
constexpr const char* kProcStat =
    "cpu  3841238 180077 499817 371335 1250 0 3341 1207 0 0\n"
    "cpu0 1911970 89080 247860 197615 302 0 1456 611 0 0\n"
    "cpu1 1929268 90996 251957 173720 947 0 1885 595 0 0\n"
    "intr 123 4 5\n";

TEST_CASE("softirq time: the aggregate cpu line's 7th column, in ticks") {
  CHECK(softirq_time_from_proc_stat(kProcStat, 100) == milliseconds(33410));
  CHECK(softirq_time_from_proc_stat(kProcStat, 1000) == milliseconds(3341));
  // Kernels before 2.6.11 had no steal column; the softirq one is all that is read.
  CHECK(softirq_time_from_proc_stat("cpu 1 2 3 4 5 6 7\n", 100) == milliseconds(70));
}

TEST_CASE("softirq time: text without the aggregate line, or cut short, gives none") {
  CHECK_FALSE(softirq_time_from_proc_stat("", 100).has_value());
  CHECK_FALSE(softirq_time_from_proc_stat("cpu0 1 2 3 4 5 6 7\n", 100).has_value());
  CHECK_FALSE(softirq_time_from_proc_stat("cpu 1 2 3 4 5 6\n", 100).has_value());
  CHECK_FALSE(softirq_time_from_proc_stat(kProcStat, 0).has_value());
}

TEST_CASE("softirq time: the live counter never runs backwards") {
  const auto a = node_softirq_time();
  const auto b = node_softirq_time();
  CHECK(a.count() >= 0);
  CHECK(b >= a);
}

}  // namespace
}  // namespace ringflow::apps
