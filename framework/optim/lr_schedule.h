// Learning-rate schedules: each is a closed-form function lr(epoch) of the epoch counter
// (an "epoch" is whatever the caller steps per: epochs or iterations), applied to one
// optimizer's lr. Construction sets lr(0); step() advances the counter and sets lr(epoch).
// The values are PyTorch's (StepLR, MultiStepLR, CosineAnnealingLR, LinearLR, SequentialLR)
// up to rounding: PyTorch updates some of them recursively, here each is computed directly,
// so a schedule resumes from a checkpoint by set_epoch(epoch) alone.
// Schedules are not chained on one optimizer (PyTorch's chaining); compose them with
// SequentialLR, e.g. linear warm-up then cosine.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ringflow/framework/optim/optimizer.h"

namespace ringflow::optim {

// A factor-free schedule: lr(epoch) from the base lr (the optimizer's lr at construction).
class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;
};

// base * gamma^floor(epoch / step_size)
class StepLR : public LRSchedule {
 public:
  StepLR(int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// base * gamma^(number of milestones <= epoch); milestones increasing
class MultiStepLR : public LRSchedule {
 public:
  MultiStepLR(std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// eta_min + (base - eta_min) * (1 + cos(pi * epoch / t_max)) / 2
class CosineAnnealingLR : public LRSchedule {
 public:
  explicit CosineAnnealingLR(int64_t t_max, double eta_min = 0);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warm-up: base * (start + (end - start) * min(epoch, total_iters) / total_iters)
class LinearLR : public LRSchedule {
 public:
  LinearLR(double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// schedules[0] until milestones[0], then schedules[1] counted from milestones[0], ...
// (PyTorch's SequentialLR): milestones.size() == schedules.size() - 1, increasing.
class SequentialLR : public LRSchedule {
 public:
  SequentialLR(std::vector<std::shared_ptr<const LRSchedule>> schedules,
               std::vector<int64_t> milestones);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  std::vector<std::shared_ptr<const LRSchedule>> schedules_;
  std::vector<int64_t> milestones_;
};

// Drives an optimizer's lr with a schedule.
class LRScheduler {
 public:
  // Takes the optimizer's current lr as the base and sets lr(0). The optimizer must
  // outlive the scheduler.
  LRScheduler(Optimizer& optimizer, std::shared_ptr<const LRSchedule> schedule);
  void step() { set_epoch(epoch_ + 1); }
  void set_epoch(int64_t epoch);  // sets lr(epoch), e.g. when resuming
  int64_t epoch() const { return epoch_; }
  double base_lr() const { return base_lr_; }
  double lr() const { return optimizer_.lr(); }

 private:
  Optimizer& optimizer_;
  std::shared_ptr<const LRSchedule> schedule_;
  double base_lr_;
  int64_t epoch_ = 0;
};

}  // namespace ringflow::optim
