// train's guard against inf and NaN (apps/non_finite.h, --on-nonfinite): the finiteness checks
// and the guard's decisions, then the app itself: a diverging run stops naming the iteration,
// a model that is not finite is neither read from nor written to a checkpoint.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "app_run.h"
#include "ringflow/apps/non_finite.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/models/registry.h"

using namespace ringflow;
using apps::NonFiniteGuard;
using apps::OnNonFinite;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A leaf whose gradient holds `values`.
Tensor param_with_grad(const std::vector<double>& values) {
  Tensor p = zeros({static_cast<int64_t>(values.size())}).requires_grad_();
  p.set_grad(from_vector(values, {static_cast<int64_t>(values.size())}, DType::f32));
  return p;
}

}  // namespace

TEST_CASE("all_finite and first_non_finite, every floating dtype") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(dtype_name(dtype));
    CHECK(apps::all_finite(from_vector({1.0, -2.0, 65000.0}, {3}, DType::f64).to(dtype)));
    for (double bad : {kNaN, kInf, -kInf})
      CHECK_FALSE(apps::all_finite(from_vector({1.0, bad, 3.0}, {3}, DType::f64).to(dtype)));
  }
  CHECK(apps::all_finite(zeros({0})));
  CHECK(apps::all_finite(from_vector({1.0, 2.0}, {2}, DType::f64).to(DType::i64)));
  NamedTensors named{{"a", ones({2})}, {"b", from_vector({kNaN}, {1}, DType::f32)},
                     {"c", from_vector({kInf}, {1}, DType::f32)}};
  CHECK(apps::first_non_finite(named) == "b");
  CHECK(apps::first_non_finite({{"a", ones({2})}}).empty());
}

TEST_CASE("grad_norm: torch.nn.utils.get_total_norm's value, NaN and inf through") {
  const Tensor p = param_with_grad({3, 4});
  CHECK(optim::grad_norm({p}) == doctest::Approx(5));
  CHECK(optim::grad_norm({p}, kInf) == doctest::Approx(4));
  for (double norm_type : {2.0, 1.0, kInf}) {
    CAPTURE(norm_type);
    CHECK(std::isnan(optim::grad_norm({p, param_with_grad({1, kNaN, 2})}, norm_type)));
    CHECK(std::isinf(optim::grad_norm({param_with_grad({kInf, 1})}, norm_type)));
  }
  // clip_grad_norm_ leaves the gradients as they were when their norm is not finite
  const Tensor q = param_with_grad({kNaN, 1});
  CHECK(std::isnan(optim::clip_grad_norm_({q}, 1.0)));
  CHECK(q.grad().to_vector<float>()[1] == 1.0f);
}

TEST_CASE("NonFiniteGuard: stop names the iteration, skip skips, ignore passes") {
  const Tensor good = param_with_grad({1, 2});
  const Tensor bad = param_with_grad({1, kNaN});

  NonFiniteGuard stop(OnNonFinite::stop, /*check_grads_every=*/2, /*scaler_checks_grads=*/false);
  CHECK(stop.allow_step(0.5, {good}, 1));
  CHECK(stop.allow_step(0.5, {bad}, 1));  // not an iteration that looks at the gradients
  CHECK_THROWS_WITH_AS(stop.allow_step(0.5, {bad}, 2), doctest::Contains("iteration 2"),
                       apps::NonFiniteError);
  CHECK_THROWS_WITH_AS(stop.allow_step(kInf, {good}, 3), doctest::Contains("the loss is inf at iteration 3"),
                       apps::NonFiniteError);

  NonFiniteGuard skip(OnNonFinite::skip, /*check_grads_every=*/0, /*scaler_checks_grads=*/false);
  CHECK_FALSE(skip.allow_step(kNaN, {bad}, 1));  // skip looks at every step
  CHECK(skip.allow_step(kNaN, {good}, 2));        // the gradients decide, alike on every rank
  for (int64_t i = 1; i < NonFiniteGuard::kMaxSkipsInARow; ++i) CHECK_FALSE(skip.allow_step(0, {bad}, 2 + i));
  CHECK_THROWS_WITH_AS(skip.allow_step(0, {bad}, 99), doctest::Contains("in a row"), apps::NonFiniteError);

  NonFiniteGuard gone(OnNonFinite::skip, 1, false);
  Tensor broken = param_with_grad({kNaN});
  {
    NoGradGuard no_grad;
    broken.fill_(kNaN);
  }
  CHECK_THROWS_WITH_AS(gone.allow_step(0, {broken}, 7), doctest::Contains("parameters hold inf or NaN"),
                       apps::NonFiniteError);

  NonFiniteGuard fp16(OnNonFinite::stop, 1, /*scaler_checks_grads=*/true);
  CHECK(fp16.allow_step(0.5, {bad}, 1));  // the grad scaler skips that step itself
  NonFiniteGuard ignore(OnNonFinite::ignore, 1, false);
  CHECK(ignore.allow_step(kNaN, {bad}, 1));

  const NamedTensors nan_model{{"conv1.weight", from_vector({kNaN}, {1}, DType::f32)}};
  CHECK_THROWS_WITH_AS(stop.may_save(nan_model, 4), doctest::Contains("'conv1.weight'"), apps::NonFiniteError);
  CHECK_FALSE(ignore.may_save(nan_model, 4));
  CHECK(stop.may_save({{"w", ones({1})}}, 4));
}

TEST_CASE("train: a diverging run stops non-zero naming the iteration (--lr 1e37)") {
  const std::string run = "--dataset synthetic --max-iters 30 --epochs 1 --threads 1 --lr 1e37 --eval-every 0";
  const Result stop = run_train(run);
  CHECK(stop.status == 1);
  CHECK(contains(stop.output, "at iteration "));
  CHECK(contains(stop.output, "training diverged"));
  CHECK_FALSE(contains(stop.output, "Training set:"));
  const Result skip = run_train(run + " --on-nonfinite skip");
  CHECK(skip.status == 1);
  CHECK(contains(skip.output, "optimizer steps in a row skipped"));
  const std::string ckpt = temp_path("ignored.safetensors");
  const Result ignore = run_train(run + " --on-nonfinite ignore --checkpoint " + ckpt);
  CHECK(ignore.status == 0);
  CHECK(contains(ignore.output, "holds inf or NaN at iteration 30: the checkpoint is left out"));
  CHECK_FALSE(std::filesystem::exists(ckpt));
  const Result bad_flag = run_train(run + " --on-nonfinite maybe");
  CHECK(bad_flag.status != 0);
  CHECK(contains(bad_flag.output, "--on-nonfinite: maybe not in {stop,skip,ignore}"));
}

TEST_CASE("train: a checkpoint or weights file whose model holds NaN is refused, naming the tensor") {
  // A CRC-valid checkpoint of the small CNN with conv1's weight all NaN, as save_checkpoint
  // writes it; the same model as a plain state_dict.
  nn::ModulePtr model = models::make_model("small_cnn");
  optim::SGD sgd(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : model->named_parameters())
      if (name == "conv1.weight") p.fill_(kNaN);
  }
  const std::string ckpt = temp_path("nan.safetensors"), weights = temp_path("nan_weights.safetensors");
  save_checkpoint(ckpt, *model, sgd, TrainingPosition{.epoch = 1, .iteration = 10},
                  {{"model", "small_cnn"}, {"dataset", "synthetic"}});
  save_weights(weights, *model);
  const std::string run = "--dataset synthetic --max-iters 2 --epochs 2 --threads 1 --eval-every 0 --resume-model-only";
  const Result resumed = run_train(run + " --resume " + ckpt);
  CHECK(resumed.status == 1);
  CHECK(contains(resumed.output, "checkpoint '" + ckpt + "': tensor 'conv1.weight' holds inf or NaN"));
  const Result loaded = run_train(run + " --weights " + weights);
  CHECK(loaded.status == 1);
  CHECK(contains(loaded.output, "--weights " + weights + ": tensor 'conv1.weight' holds inf or NaN"));
  CHECK(run_train(run + " --weights " + weights + " --on-nonfinite ignore").status == 0);
  std::filesystem::remove(ckpt);
  std::filesystem::remove(weights);
}
