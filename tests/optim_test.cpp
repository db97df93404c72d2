// Optimizers, learning-rate schedules and gradient clipping against PyTorch
// (tests/fixtures/optim.safetensors, written by make_optim.py): the parameters after every
// step of each optimizer config within 1e-12 in f64 and 1e-5 in f32 (see Deviation in
// torch_compare.h), on the fused CPU loop and on the tensor-op path (gradients in a
// strided layout); the lr sequence of each schedule; clip_grad_norm_'s norm and gradients;
// optimizer state round trips through state_dict and resumes the same trajectory.
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "ringflow/framework/optim/optim.h"
#include "ringflow/kernels/simt/host_backend.h"
#include "ringflow/tests/torch_compare.h"

using namespace ringflow;
using json = nlohmann::json;
using ringflow::testing::check_close;
using ringflow::testing::load_torch_fixture;

namespace {

constexpr double kFloor = 1e-3;

const SafetensorsFile& fixture() {
  static const SafetensorsFile file = load_torch_fixture("optim.safetensors", "make_optim.py");
  return file;
}
int meta_int(const std::string& key) { return std::stoi(fixture().metadata.at(key)); }

std::unique_ptr<optim::Optimizer> make_optimizer(const std::vector<Tensor>& params, const json& c) {
  const std::string kind = c.at("optimizer");
  if (kind == "sgd") {
    optim::SGDOptions o;
    o.lr = c.at("lr");
    o.momentum = c.value("momentum", 0.0);
    o.dampening = c.value("dampening", 0.0);
    o.weight_decay = c.value("weight_decay", 0.0);
    o.nesterov = c.value("nesterov", false);
    return std::make_unique<optim::SGD>(params, o);
  }
  optim::AdamOptions o;
  o.lr = c.at("lr");
  o.beta1 = c.at("beta1");
  o.beta2 = c.at("beta2");
  o.eps = c.at("eps");
  o.weight_decay = c.at("weight_decay");
  if (kind == "adam") return std::make_unique<optim::Adam>(params, o);
  REQUIRE(kind == "adamw");
  return std::make_unique<optim::AdamW>(params, o);
}

// A copy of t in a non-dense layout (every other element of a larger buffer), which sends
// the optimizer down its tensor-op path.
Tensor strided_copy(const Tensor& t) {
  Tensor base = zeros({2 * t.numel()}, t.dtype());
  Tensor out = base.slice(0, 0, 2 * t.numel(), 2).view(t.shape());
  out.copy_(t);
  REQUIRE(!out.is_contiguous());
  return out;
}

std::vector<Tensor> fresh_params(DType dtype) {
  std::vector<Tensor> params;
  for (int j = 0; j < meta_int("num_params"); ++j) {
    Tensor p = fixture().at("init.p" + std::to_string(j)).to(dtype).clone();
    p.requires_grad_();
    params.push_back(p);
  }
  return params;
}

void set_grads(const std::vector<Tensor>& params, int step, bool strided) {
  for (size_t j = 0; j < params.size(); ++j) {
    const Tensor g = fixture().at("grad.s" + std::to_string(step) + ".p" + std::to_string(j))
                         .to(params[j].dtype()).clone();
    params[j].set_grad(strided ? strided_copy(g) : g);
  }
}

// Steps [from, to) of config `name`, checking the parameters after each.
double run_steps(const std::string& name, optim::Optimizer& opt,
                 optim::LRScheduler* sched, const std::vector<Tensor>& params, int from, int to,
                 double tol, bool strided) {
  double worst = 0;
  for (int k = from; k < to; ++k) {
    set_grads(params, k, strided);
    opt.step();
    if (sched) sched->step();
    for (size_t j = 0; j < params.size(); ++j) {
      const std::string key = name + ".s" + std::to_string(k) + ".p" + std::to_string(j);
      worst = std::max(worst, check_close(params[j], fixture().at(key), tol, kFloor, key));
    }
  }
  return worst;
}

double run_config(const std::string& name, const json& c, DType dtype, double tol, bool strided) {
  CAPTURE(name);
  const std::string dtype_text = dtype_name(dtype);
  CAPTURE(dtype_text);
  CAPTURE(strided);
  const std::vector<Tensor> params = fresh_params(dtype);
  auto opt = make_optimizer(params, c);
  std::unique_ptr<optim::LRScheduler> sched;
  if (c.contains("step_lr"))
    sched = std::make_unique<optim::LRScheduler>(
        *opt, std::make_shared<optim::StepLR>(c["step_lr"][0].get<int64_t>(), c["step_lr"][1].get<double>()));
  const double worst = run_steps(name, *opt, sched.get(), params, 0, meta_int("steps"), tol, strided);
  return worst;
}

std::shared_ptr<const optim::LRSchedule> make_schedule(const json& s) {
  const std::string kind = s.at("kind");
  if (kind == "step") return std::make_shared<optim::StepLR>(s.at("step_size"), s.at("gamma"));
  if (kind == "multistep")
    return std::make_shared<optim::MultiStepLR>(s.at("milestones").get<std::vector<int64_t>>(),
                                                s.at("gamma"));
  if (kind == "cosine") return std::make_shared<optim::CosineAnnealingLR>(s.at("t_max"), s.at("eta_min"));
  if (kind == "linear")
    return std::make_shared<optim::LinearLR>(s.at("start_factor"), s.at("end_factor"), s.at("total_iters"));
  REQUIRE(kind == "sequential");
  std::vector<std::shared_ptr<const optim::LRSchedule>> parts;
  for (const json& x : s.at("schedules")) parts.push_back(make_schedule(x));
  return std::make_shared<optim::SequentialLR>(parts, s.at("milestones").get<std::vector<int64_t>>());
}

}  // namespace

TEST_CASE("optimizers match PyTorch step for step (f64, fused loop, 1e-12)") {
  const json configs = json::parse(fixture().metadata.at("configs"));
  double worst = 0;
  for (const auto& [name, c] : configs.items())
    worst = std::max(worst, run_config(name, c, DType::f64, 1e-12, /*strided=*/false));
  MESSAGE("largest deviation from PyTorch: " << worst);
}

TEST_CASE("optimizers match PyTorch step for step (f64, tensor-op path, 1e-12)") {
  const json configs = json::parse(fixture().metadata.at("configs"));
  double worst = 0;
  for (const auto& [name, c] : configs.items())
    worst = std::max(worst, run_config(name, c, DType::f64, 1e-12, /*strided=*/true));
  MESSAGE("largest deviation from PyTorch: " << worst);
}

TEST_CASE("optimizers match PyTorch step for step (f32, 1e-5)") {
  const json configs = json::parse(fixture().metadata.at("configs"));
  double worst = 0;
  for (const auto& [name, c] : configs.items()) {
    worst = std::max(worst, run_config(name, c, DType::f32, 1e-5, /*strided=*/false));
    worst = std::max(worst, run_config(name, c, DType::f32, 1e-5, /*strided=*/true));
  }
  MESSAGE("largest deviation from PyTorch: " << worst);
}

TEST_CASE("optimizer state round-trips through state_dict and resumes the trajectory") {
  const json configs = json::parse(fixture().metadata.at("configs"));
  const int steps = meta_int("steps"), half = steps / 2;
  for (const std::string name : {"sgd_momentum_dampening", "sgd_nesterov", "adam", "adamw"}) {
    CAPTURE(name);
    const json& c = configs.at(name);
    std::map<std::string, Tensor> saved;
    std::vector<Tensor> saved_params;
    {
      const std::vector<Tensor> params = fresh_params(DType::f64);
      auto opt = make_optimizer(params, c);
      run_steps(name, *opt, nullptr, params, 0, half, 1e-12, false);
      for (const auto& [key, t] : opt->state_dict()) saved[key] = t.clone();
      for (const Tensor& p : params) saved_params.push_back(p.detach().clone());
    }
    CHECK(saved.count("lr") == 1);
    CHECK(saved.count(std::string("state.0.") + (c.at("optimizer") == "sgd" ? "momentum_buffer" : "exp_avg_sq")) == 1);
    std::vector<Tensor> params;
    for (const Tensor& p : saved_params) params.push_back(Tensor(p).requires_grad_());
    auto opt = make_optimizer(params, c);
    opt->load_state_dict(saved);
    run_steps(name, *opt, nullptr, params, half, steps, 1e-12, false);
  }
}

TEST_CASE("load_state_dict rejects malformed state, naming the entry") {
  const std::vector<Tensor> params = fresh_params(DType::f64);
  optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  set_grads(params, 0, false);
  opt.step();
  const std::map<std::string, Tensor> good = opt.state_dict();
  REQUIRE(good.size() == params.size() + 1);  // one momentum buffer per parameter, lr
  auto fails = [&](std::map<std::string, Tensor> state, const std::string& needle) {
    CAPTURE(needle);
    try {
      opt.load_state_dict(state);
      FAIL("no error");
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
    }
  };
  auto with = [&](const std::string& key, const Tensor& t) {
    auto s = good;
    s[key] = t;
    return s;
  };
  fails(with("state.0.exp_avg", zeros({4, 3}, DType::f64)), "unknown key 'exp_avg'");
  fails(with("state.7.momentum_buffer", zeros({4, 3}, DType::f64)), "parameter index 7 out of range");
  fails(with("state.1.momentum_buffer", zeros({4, 3}, DType::f64)), "shape (4, 3) but parameter 1 has shape (5,)");
  fails(with("bogus", zeros({1}, DType::f64)), "'bogus': unexpected entry");
  optim::Adam adam(params, {});
  std::map<std::string, Tensor> partial{{"state.0.exp_avg", zeros({4, 3}, DType::f64)}};
  try {
    adam.load_state_dict(partial);
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find("has some entries but not 'state.0.") != std::string::npos, msg);
  }
  opt.load_state_dict(good);  // still loads after the failures
}

TEST_CASE("learning-rate schedules match PyTorch's") {
  const double base_lr = std::stod(fixture().metadata.at("base_lr"));
  const int epochs = meta_int("epochs");
  const json schedules = json::parse(fixture().metadata.at("schedules"));
  for (const auto& [name, s] : schedules.items()) {
    CAPTURE(name);
    Tensor p = zeros({1}, DType::f64);
    p.requires_grad_();
    optim::SGD opt({p}, {.lr = base_lr});
    optim::LRScheduler sched(opt, make_schedule(s));
    std::vector<double> lrs;
    for (int e = 0; e < epochs; ++e) {
      lrs.push_back(opt.lr());
      sched.step();
    }
    check_close(from_vector(lrs, {epochs}, DType::f64), fixture().at("lr." + name), 1e-12, 1e-12,
                "lr." + name);
    sched.set_epoch(5);  // resuming sets the lr directly
    CHECK(opt.lr() == doctest::Approx(fixture().at("lr." + name).to_vector<double>()[5]).epsilon(1e-12));
  }
}

TEST_CASE("clip_grad_norm_ matches PyTorch") {
  const json clips = json::parse(fixture().metadata.at("clips"));
  for (const auto& [name, c] : clips.items()) {
    for (DType dtype : {DType::f64, DType::f32}) {
      CAPTURE(name);
      const std::string dtype_text = dtype_name(dtype);
  CAPTURE(dtype_text);
      const double tol = dtype == DType::f64 ? 1e-12 : 1e-6;
      std::vector<Tensor> params;
      for (int j = 0; j < meta_int("num_params"); ++j) {
        const Tensor g = fixture().at("clip.grad.g" + std::to_string(j)).to(dtype).clone();
        Tensor p = zeros(g.shape(), dtype);
        p.requires_grad_();
        p.set_grad(g);
        params.push_back(p);
      }
      params.push_back(Tensor(zeros({3}, dtype)).requires_grad_());  // no grad: skipped
      const double norm_type = c.at("norm_type").is_string() ? INFINITY : c.at("norm_type").get<double>();
      const double norm = optim::clip_grad_norm_(params, c.at("max_norm"), norm_type);
      check_close(scalar_tensor(norm, DType::f64), fixture().at("clip." + name + ".norm"), tol, 0,
                  "clip." + name + ".norm");
      for (int j = 0; j < meta_int("num_params"); ++j)
        check_close(params[j].grad(), fixture().at("clip." + name + ".g" + std::to_string(j)), tol,
                    kFloor, "clip." + name + ".g" + std::to_string(j));
    }
  }
  CHECK(optim::clip_grad_norm_({}, 1.0) == 0.0);
}

TEST_CASE("zero_grad drops gradients or fills them with zeros; steps skip absent gradients") {
  std::vector<Tensor> params = fresh_params(DType::f64);
  optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
  set_grads(params, 0, false);
  const Tensor g0 = params[0].grad();
  opt.zero_grad(/*set_to_none=*/false);
  CHECK(params[0].grad().shares_storage(g0));
  CHECK(sum(abs(params[0].grad())).item() == 0.0);
  opt.zero_grad();
  for (const Tensor& p : params) CHECK(!p.grad().defined());
  const Tensor before = params[1].detach().clone();
  params[0].set_grad(ones({4, 3}, DType::f64));
  opt.step();  // only parameter 0 has a gradient
  CHECK(sum(abs(params[1] - before)).item() == 0.0);
  CHECK(opt.state_dict().count("state.1.momentum_buffer") == 0);
  CHECK(opt.state_dict().count("state.0.momentum_buffer") == 1);
}

TEST_CASE("optimizer arguments are checked") {
  std::vector<Tensor> params = fresh_params(DType::f64);
  CHECK_THROWS_AS(optim::SGD(params, {.lr = -1}), std::invalid_argument);
  CHECK_THROWS_AS(optim::SGD(params, {.lr = 0.1, .momentum = 0, .nesterov = true}), std::invalid_argument);
  CHECK_THROWS_AS(optim::SGD({params[0], params[0]}, {.lr = 0.1}), std::invalid_argument);
  CHECK_THROWS_AS(optim::SGD({params[0] * 2.0}, {.lr = 0.1}), std::invalid_argument);
  CHECK_THROWS_AS(optim::Adam(params, {.beta1 = 1.0}), std::invalid_argument);
  CHECK_THROWS_AS(optim::StepLR(0), std::invalid_argument);
  CHECK_THROWS_AS(optim::SequentialLR({std::make_shared<optim::StepLR>(2)}, {3}), std::invalid_argument);
}

// GradScaler (issue 14): PyTorch's GradScaler rule, checked on hand-set gradients whose
// unscaled values are known; on the cpu table (tensor ops), and on tables with unscale_grads
// (the reference's, and the CUDA one's fused kernel run on the host: one launch per dtype).
static void check_grad_scaler() {
  auto make = [] {
    Tensor p = from_vector({1.0, -2.0, 3.0}, {3}).requires_grad_();
    return p;
  };
  const double bad_values[] = {INFINITY, -INFINITY, NAN};
  for (double bad : bad_values) {
    CAPTURE(bad);
    Tensor p = make();
    optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
    optim::GradScaler scaler({.init_scale = 1024, .growth_interval = 3});
    // A finite step first, so that there is momentum state to keep unchanged.
    p.set_grad(from_vector({1024.0, 2048.0, -1024.0}, {3}));
    CHECK(scaler.step(sgd));
    scaler.update();
    const std::vector<double> after_first = p.to_vector<double>();
    const Tensor momentum = sgd.state_dict().at("state.0.momentum_buffer").clone();
    CHECK(momentum.to_vector<double>() == std::vector<double>{1.0, 2.0, -1.0});  // unscaled
    // An inf or NaN gradient: skipped, parameters and state unchanged, the scale halved.
    p.set_grad(from_vector({1.0, bad, 1.0}, {3}));
    CHECK_FALSE(scaler.step(sgd));
    scaler.update();
    CHECK(p.to_vector<double>() == after_first);
    CHECK(sgd.state_dict().at("state.0.momentum_buffer").to_vector<double>() ==
          momentum.to_vector<double>());
    CHECK(scaler.get_scale() == 512);
    CHECK(scaler.skipped_steps() == 1);
  }
  // Growth: three finite steps in a row double the scale; a skipped one restarts the count.
  Tensor p = make();
  optim::SGD sgd({p}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 8, .growth_interval = 3});
  std::vector<double> scales;
  for (bool finite : {true, true, false, true, true, true, true}) {
    p.set_grad(from_vector({finite ? 8.0 : NAN, 0.0, 0.0}, {3}));
    scaler.step(sgd);
    scaler.update();
    scales.push_back(scaler.get_scale());
  }
  CHECK(scales == std::vector<double>{8, 8, 4, 4, 4, 8, 8});
  // The loss is scaled, and unscale_ before a clip divides the gradients exactly once.
  CHECK(scaler.scale(scalar_tensor(0.5)).item() == 4.0);
  p.set_grad(from_vector({8.0, 16.0, -4.0}, {3}));
  scaler.unscale_(sgd);
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1.0, 2.0, -0.5});
  CHECK_THROWS_WITH_AS(scaler.unscale_(sgd), doctest::Contains("twice"), std::invalid_argument);
  scaler.step(sgd);  // does not unscale again
  CHECK_THROWS_WITH_AS(scaler.step(sgd), doctest::Contains("step() called twice"), std::invalid_argument);
  scaler.update();
  // Its state round-trips; a bad one is refused naming the entry.
  optim::GradScaler other;
  other.load_state_dict(scaler.state_dict());
  CHECK(other.state_dict() == scaler.state_dict());
  CHECK_THROWS_WITH_AS(other.load_state_dict({{"scale", 2.0}}), doctest::Contains("growth_tracker"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(other.load_state_dict({{"scale", 0.0}, {"growth_tracker", 0.0}, {"skipped_steps", 0.0}}),
                       doctest::Contains("scale"), std::invalid_argument);
}

// Note [The grad scaler's fused step]: on a table with check_scaled_grads, scaler.step checks
// the gradients and the optimizer unscales them as it reads them. Against the same run with
// unscale_ first (the separate pass, kept for clipping): the same bits in the parameters and
// every state entry after each step, the scale moving alike; the fused step leaves the
// gradients scaled (how it is told apart). A skipped step, the first one included, leaves no
// state behind (no momentum buffer, no Adam step), as if step had not been called. On a table
// without it (the CPU's) scaler.step unscales first, as before.
static void check_fused_grad_scaler(DType dtype, bool fused) {
  for (int which = 0; which < 3; ++which) {  // SGD with momentum and weight decay, Adam, AdamW
    CAPTURE(which);
    const auto optimizer = [&](const std::vector<Tensor>& params) -> std::unique_ptr<optim::Optimizer> {
      if (which == 0) return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9,
                                                                                    .weight_decay = 1e-2});
      const optim::AdamOptions o{.lr = 1e-2, .weight_decay = 0.05};
      if (which == 1) return std::make_unique<optim::Adam>(params, o);
      return std::make_unique<optim::AdamW>(params, o);
    };
    Generator gen(21);
    std::vector<Tensor> pa, pb;
    for (const Shape& s : {Shape{5, 7}, Shape{7}, Shape{3, 2, 3, 3}}) {
      const Tensor p = randn(s, &gen).to(dtype);
      pa.push_back(p.clone().requires_grad_());
      pb.push_back(p.clone().requires_grad_());
    }
    const auto oa = optimizer(pa), ob = optimizer(pb);
    // 3 * 2^10: 1 / scale is no power of two, so that unscaled 16-bit gradients round.
    optim::GradScaler sa({.init_scale = 3072, .growth_interval = 2}), sb({.init_scale = 3072, .growth_interval = 2});
    for (int step = 0; step < 5; ++step) {
      CAPTURE(step);
      const bool overflow = step == 0 || step == 3;  // the first step skipped, and a later one
      for (size_t i = 0; i < pa.size(); ++i) {
        Tensor g = mul(randn(pa[i].shape(), &gen), sa.get_scale()).to(dtype);
        if (overflow && i == 1) g.narrow(0, 2, 1).fill_(INFINITY);
        pa[i].set_grad(g.clone());
        pb[i].set_grad(g.clone());
      }
      const Tensor scaled_grad = pb[0].grad().clone();
      sa.unscale_(*oa);
      CHECK(sa.step(*oa) == !overflow);
      CHECK(sb.step(*ob) == !overflow);
      sa.update();
      sb.update();
      CHECK(sb.get_scale() == sa.get_scale());
      for (size_t i = 0; i < pa.size(); ++i) CHECK(pb[i].to_vector<double>() == pa[i].to_vector<double>());
      const auto state_a = oa->state_dict(), state_b = ob->state_dict();
      CHECK(state_b.size() == state_a.size());
      for (const auto& [key, t] : state_a) {
        CAPTURE(key);
        REQUIRE(state_b.count(key));
        CHECK(state_b.at(key).to_vector<double>() == t.to_vector<double>());
      }
      if (step == 0) CHECK(state_a.size() == 1);  // "lr" alone: the skipped first step made no state
      // Fused: the gradients keep the scale; else unscale_ divided them in place.
      CHECK((pb[0].grad().to_vector<double>() == scaled_grad.to_vector<double>()) == fused);
    }
    CHECK(sb.skipped_steps() == 2);
  }
}

TEST_CASE("GradScaler fused into the optimizer's step: the bits of unscale_ then step, every dtype") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    SUBCASE("reference") {
      const ReferenceKernelsGuard table;
      check_fused_grad_scaler(dtype, /*fused=*/true);
    }
    SUBCASE("simt on the host") {
      const KernelTableGuard table(simt_host_backend());
      check_fused_grad_scaler(dtype, /*fused=*/true);
    }
    SUBCASE("cpu: unscale_ first, as before") { check_fused_grad_scaler(dtype, /*fused=*/false); }
  }
}

TEST_CASE("the CPU table takes no LossScale: it has no check_scaled_grads, so the scaler unscales first") {
  const bool has_check = cpu_backend().check_scaled_grads != nullptr;
  CHECK_FALSE(has_check);
  float inv = 0.5f, found = 0;
  std::vector<float> p(3, 1.0f), g(3, 2.0f), m(3, 0.0f), v(3, 0.0f);
  const std::vector<OptimizerSlot> slots{{p.data(), g.data(), {m.data(), v.data()}, 3}};
  SgdStep sgd;
  sgd.lr = 0.1;
  sgd.scale = {&inv, &found};
  CHECK_THROWS_WITH_AS(cpu_backend().sgd_step(DType::f32, slots, sgd), doctest::Contains("LossScale"),
                       std::invalid_argument);
  AdamStep adam;
  adam.lr = 0.1;
  adam.scale = {&inv, &found};
  CHECK_THROWS_WITH_AS(cpu_backend().adam_step(DType::bf16, slots, adam), doctest::Contains("LossScale"),
                       std::invalid_argument);
  CHECK(p == std::vector<float>(3, 1.0f));
}

TEST_CASE("GradScaler: unscales, skips a step with inf or NaN and halves, doubles after the interval") {
  SUBCASE("cpu") { check_grad_scaler(); }
  SUBCASE("reference") {
    const ReferenceKernelsGuard table;
    check_grad_scaler();
  }
  SUBCASE("simt on the host") {
    const KernelTableGuard table(simt_host_backend());
    check_grad_scaler();
  }
}
