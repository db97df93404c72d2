// The DDP bucket assignment (comm/ddp/buckets.h) and the traffic closed forms (comm/base/traffic.h),
// without MPI: caps, dtypes, the first-bucket cap, ordering, argument errors; the traffic of
// each algorithm summed over the ranks (what one sends another receives) and against the
// issue's formulas.
#include <doctest/doctest.h>

#include <numeric>

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/ddp/buckets.h"
#include "ringflow/comm/base/traffic.h"

namespace ringflow::comm {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

std::vector<size_t> reversed(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

std::vector<BucketTensor> f32_tensors(const std::vector<int64_t>& bytes) {
  std::vector<BucketTensor> t;
  for (int64_t b : bytes) t.push_back({b, DType::f32});
  return t;
}

}  // namespace

TEST_CASE("assign_buckets: a bucket holds at most its cap; a bigger tensor gets its own") {
  // Registration order 0..5; visited in reverse: 5, 4, 3, 2, 1, 0.
  const auto t = f32_tensors({40, 100, 60, 300, 20, 30});
  CHECK(assign_buckets(t, reversed(6), {100}) == Buckets{{5, 4}, {3}, {2}, {1}, {0}});
  // Exactly at the cap fits: 30 + 20 = 50 <= 50; then 300 alone; 60; 100 alone (over); 40.
  CHECK(assign_buckets(t, reversed(6), {50}) == Buckets{{5, 4}, {3}, {2}, {1}, {0}});
  CHECK(assign_buckets(t, reversed(6), {1000}) == Buckets{{5, 4, 3, 2, 1, 0}});
  // Cap 0: one tensor per bucket.
  CHECK(assign_buckets(t, reversed(6), {0}) == Buckets{{5}, {4}, {3}, {2}, {1}, {0}});
}

TEST_CASE("assign_buckets: the first cap applies to the first bucket, the last cap to the rest") {
  const auto t = f32_tensors({10, 10, 10, 10, 10, 10});
  CHECK(assign_buckets(t, reversed(6), {10, 30}) == Buckets{{5}, {4, 3, 2}, {1, 0}});
  CHECK(assign_buckets(t, reversed(6), {20, 10, 40}) == Buckets{{5, 4}, {3}, {2, 1, 0}});
}

TEST_CASE("assign_buckets: one dtype per bucket, buckets ordered by their first tensor") {
  std::vector<BucketTensor> t = {{8, DType::f32}, {8, DType::f64}, {8, DType::f32},
                                 {8, DType::f64}, {8, DType::f32}};
  // Visited 4, 3, 2, 1, 0 with cap 16: f32 gets {4, 2} then {0}; f64 gets {3, 1}.
  CHECK(assign_buckets(t, reversed(5), {16}) == Buckets{{4, 2}, {3, 1}, {0}});
}

TEST_CASE("assign_buckets: any order (the rebuild's ready order)") {
  const auto t = f32_tensors({4, 4, 4, 4});
  CHECK(assign_buckets(t, {2, 0, 3, 1}, {8}) == Buckets{{2, 0}, {3, 1}});
  CHECK(assign_buckets(t, {0, 1, 2, 3}, {4, 12}) == Buckets{{0}, {1, 2, 3}});
  CHECK(assign_buckets({}, {}, {8}).empty());
}

TEST_CASE("assign_buckets: errors name the problem") {
  const auto t = f32_tensors({4, 4});
  CHECK_THROWS_WITH_AS(assign_buckets(t, {0}, {8}), doctest::Contains("order has 1 entries"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(assign_buckets(t, {0, 0}, {8}), doctest::Contains("not a permutation"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(assign_buckets(t, {0, 1}, {}), doctest::Contains("no bucket cap"),
                       std::invalid_argument);
  CHECK_THROWS_AS(assign_buckets(t, {0, 1}, {-1}), std::invalid_argument);
}

TEST_CASE("bucket_caps: MiB to bytes, the first cap never above the cap") {
  CHECK(bucket_caps(1, 25) == std::vector<int64_t>{1 << 20, 25 << 20});
  CHECK(bucket_caps(1, 0.5) == std::vector<int64_t>{1 << 19, 1 << 19});
  CHECK(bucket_caps(1, 0) == std::vector<int64_t>{0, 0});
  CHECK_THROWS_AS(bucket_caps(1, -1), std::invalid_argument);
}

TEST_CASE("traffic: every byte sent is received; the issue's per-rank formulas") {
  const Algorithm algos[] = {Algorithm::naive, Algorithm::tree, Algorithm::recursive_doubling,
                             Algorithm::ring, Algorithm::native};
  for (int n = 1; n <= 9; ++n) {
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1009}}) {
      const int64_t s = count * 4;
      for (Algorithm a : algos) {
        int64_t sent = 0, received = 0;
        for (int r = 0; r < n; ++r) {
          const Traffic t = allreduce_traffic(a, count, 4, n, r);
          sent += t.sent;
          received += t.received;
          CHECK_FALSE(t.measured);
          if (a == Algorithm::ring && count >= n) {
            // 2(n-1)/n S, within the uneven chunks: one element per chunk each way.
            const double theory = 2.0 * (n - 1) / n * static_cast<double>(s);
            CHECK(std::abs(static_cast<double>(t.sent) - theory) <= 2 * 4);
            CHECK(std::abs(static_cast<double>(t.received) - theory) <= 2 * 4);
          }
          if (a == Algorithm::naive) {
            CHECK(t.sent + t.received == (n == 1 ? 0 : r == 0 ? 2 * (n - 1) * s : 2 * s));
          }
        }
        CAPTURE(algorithm_name(a));
        CAPTURE(n);
        CAPTURE(count);
        CHECK(sent == received);
        if (a == Algorithm::ring && n > 1) CHECK(sent == 2 * (n - 1) * s);  // over all ranks
      }
      // Broadcast: n - 1 receivers of S, whatever the root.
      for (int root = 0; root < n; ++root) {
        int64_t sent = 0, received = 0;
        for (int r = 0; r < n; ++r) {
          sent += broadcast_traffic(s, n, r, root).sent;
          received += broadcast_traffic(s, n, r, root).received;
        }
        CHECK(sent == (n - 1) * s);
        CHECK(received == (n - 1) * s);
      }
    }
  }
  CHECK_THROWS_AS(allreduce_traffic(Algorithm::automatic, 10, 4, 2, 0), std::invalid_argument);
  CHECK_THROWS_AS(allreduce_traffic(Algorithm::ring, 10, 4, 2, 2), std::invalid_argument);
}

}  // namespace ringflow::comm
