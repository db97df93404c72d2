#include "ringflow/framework/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ringflow::optim {

StepLR::StepLR(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {
  RF_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
}
double StepLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(std::vector<int64_t> milestones, double gamma)
    : milestones_(std::move(milestones)), gamma_(gamma) {
  RF_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()),
           "MultiStepLR: milestones must be increasing");
}
double MultiStepLR::lr_at(int64_t epoch, double base_lr) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

CosineAnnealingLR::CosineAnnealingLR(int64_t t_max, double eta_min) : t_max_(t_max), eta_min_(eta_min) {
  RF_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
}
double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  return eta_min_ + (base_lr - eta_min_) *
                        (1 + std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_))) / 2;
}

LinearLR::LinearLR(double start_factor, double end_factor, int64_t total_iters)
    : start_(start_factor), end_(end_factor), total_(total_iters) {
  RF_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ",
           start_factor);
  RF_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  RF_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
}
double LinearLR::lr_at(int64_t epoch, double base_lr) const {
  const double done = static_cast<double>(std::min(epoch, total_)) / static_cast<double>(total_);
  return base_lr * (start_ + (end_ - start_) * done);
}

SequentialLR::SequentialLR(std::vector<std::shared_ptr<const LRSchedule>> schedules,
                           std::vector<int64_t> milestones)
    : schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
  RF_CHECK(!schedules_.empty() && milestones_.size() + 1 == schedules_.size(),
           "SequentialLR: expected one milestone fewer than schedules, got ", milestones_.size(),
           " milestones for ", schedules_.size(), " schedules");
  RF_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()),
           "SequentialLR: milestones must be increasing");
  for (const auto& s : schedules_) RF_CHECK(s != nullptr, "SequentialLR: null schedule");
}
double SequentialLR::lr_at(int64_t epoch, double base_lr) const {
  const size_t k = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  const int64_t start = k == 0 ? 0 : milestones_[k - 1];
  return schedules_[k]->lr_at(epoch - start, base_lr);
}

LRScheduler::LRScheduler(Optimizer& optimizer, std::shared_ptr<const LRSchedule> schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)), base_lr_(optimizer.lr()) {
  RF_CHECK(schedule_ != nullptr, "LRScheduler: null schedule");
  set_epoch(0);
}

void LRScheduler::set_epoch(int64_t epoch) {
  RF_CHECK(epoch >= 0, "LRScheduler: negative epoch ", epoch);
  epoch_ = epoch;
  optimizer_.set_lr(schedule_->lr_at(epoch, base_lr_));
}

}  // namespace ringflow::optim
