#include "ringflow/comm/ddp/bucket_tuner.h"

#include <algorithm>

#include "ringflow/framework/error.h"

namespace ringflow::comm {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

BucketTuner::BucketTuner(BucketTunerOptions options) : options_(std::move(options)) {
  RF_CHECK(!options_.caps_mb.empty(), "BucketTuner: no candidate caps");
  RF_CHECK(options_.warmup >= 0 && options_.measured >= 1,
           "BucketTuner: warmup must be >= 0 and measured >= 1, got ", options_.warmup, " and ",
           options_.measured);
  for (double cap : options_.caps_mb) {
    RF_CHECK(cap > 0, "BucketTuner: candidate caps must be > 0 MiB, got ", cap);
    round_.push_back({std::min(1.0, cap), cap});
  }
  samples_.resize(round_.size());
}

BucketCaps BucketTuner::current() const {
  return done() ? tuning_.tried[static_cast<size_t>(tuning_.chosen)] : round_[candidate_];
}

bool BucketTuner::record(double ms) {
  if (done()) return false;
  if (seen_++ >= options_.warmup) samples_[candidate_].push_back(ms);
  if (seen_ < options_.warmup + options_.measured) return false;
  seen_ = 0;
  return ++candidate_ == round_.size();
}

std::vector<double> BucketTuner::round_medians() const {
  std::vector<double> medians;
  for (const auto& s : samples_) medians.push_back(median(s));
  return medians;
}

void BucketTuner::agree(const std::vector<double>& slowest) {
  RF_CHECK(slowest.size() == round_.size(), "BucketTuner::agree: ", slowest.size(),
           " times for ", round_.size(), " candidates");
  for (size_t k = 0; k < round_.size(); ++k) {
    tuning_.tried.push_back(round_[k]);
    tuning_.ms.push_back(slowest[k]);
  }
  const auto best = std::min_element(tuning_.ms.begin(), tuning_.ms.end()) - tuning_.ms.begin();
  const BucketCaps winner = tuning_.tried[static_cast<size_t>(best)];
  // The second round: the winner without its small first bucket, where it has one.
  if (++rounds_done_ == 1 && winner.first_mb < winner.cap_mb) {
    round_ = {{winner.cap_mb, winner.cap_mb}};
    samples_.assign(1, {});
    candidate_ = 0;
    return;
  }
  tuning_.chosen = static_cast<int>(best);
}

}  // namespace ringflow::comm
