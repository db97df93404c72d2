// The DDP bucket assignment (comm/ddp/buckets.h), the bucket tuner's rounds and choice
// (comm/ddp/bucket_tuner.h) and the traffic closed forms (comm/base/traffic.h),
// without MPI: caps, dtypes, the first-bucket cap, ordering, argument errors; the traffic of
// each algorithm summed over the ranks (what one sends another receives) and against the
// issue's formulas.
#include <doctest/doctest.h>

#include <numeric>

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/ddp/bucket_tuner.h"
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

namespace {

// Feeds one candidate's iterations; returns what the last record() said.
bool feed(BucketTuner& t, const std::vector<double>& ms) {
  bool round_over = false;
  for (double v : ms) round_over = t.record(v);
  return round_over;
}

bool same(const BucketCaps& a, const BucketCaps& b) {
  return a.first_mb == b.first_mb && a.cap_mb == b.cap_mb;
}

}  // namespace

TEST_CASE("BucketTuner: each cap with the 1 MiB first bucket, then the winner without it") {
  BucketTuner t({.caps_mb = {0.5, 5, 25}, .warmup = 1, .measured = 3});
  CHECK(same(t.current(), {0.5, 0.5}));  // the first bucket's cap never above the cap
  CHECK_FALSE(feed(t, {900, 50, 52, 51}));  // the warm-up iteration is not counted
  CHECK(same(t.current(), {1, 5}));
  CHECK_FALSE(feed(t, {900, 40, 41, 39}));
  CHECK(same(t.current(), {1, 25}));
  CHECK(feed(t, {900, 60, 60, 61}));  // the round is over: the ranks must agree
  CHECK(t.round_medians() == std::vector<double>{51, 40, 60});
  CHECK_FALSE(t.done());
  t.agree({51, 45, 60});  // the slowest rank's: 5 MiB wins
  CHECK(same(t.current(), {5, 5}));
  CHECK(feed(t, {900, 43, 42, 44}));
  CHECK(t.round_medians() == std::vector<double>{43});
  t.agree({43});
  REQUIRE(t.done());
  CHECK(t.tuning().chosen == 3);
  CHECK(same(t.current(), {5, 5}));
  CHECK(t.tuning().ms == std::vector<double>{51, 45, 60, 43});
  CHECK_FALSE(t.record(1));  // done: nothing changes any more
  CHECK(same(t.current(), {5, 5}));
}

TEST_CASE("BucketTuner: a slower second round keeps the first round's winner") {
  BucketTuner t({.caps_mb = {1, 10}, .warmup = 0, .measured = 2});
  CHECK_FALSE(feed(t, {30, 30}));
  CHECK(feed(t, {20, 22}));
  CHECK(t.round_medians() == std::vector<double>{30, 21});
  t.agree({30, 21});
  CHECK(same(t.current(), {10, 10}));
  CHECK(feed(t, {25, 25}));
  t.agree({25});
  REQUIRE(t.done());
  CHECK(same(t.current(), {1, 10}));
}

TEST_CASE("BucketTuner: a winner without a small first bucket ends after one round") {
  BucketTuner t({.caps_mb = {0.25, 8}, .warmup = 0, .measured = 1});
  CHECK_FALSE(t.record(5));
  CHECK(t.record(9));
  t.agree({5, 9});
  REQUIRE(t.done());
  CHECK(same(t.current(), {0.25, 0.25}));
}

TEST_CASE("BucketTuner: errors name the problem") {
  CHECK_THROWS_WITH_AS(BucketTuner({.caps_mb = {}}), doctest::Contains("no candidate"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(BucketTuner({.caps_mb = {1, 0}}), doctest::Contains("> 0 MiB"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(BucketTuner({.measured = 0}), doctest::Contains("measured >= 1"),
                       std::invalid_argument);
  BucketTuner t({.caps_mb = {1}, .warmup = 0, .measured = 1});
  CHECK(t.record(1));
  CHECK_THROWS_AS(t.agree({1, 2}), std::invalid_argument);
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
