// The functional ops, forward and backward, against PyTorch, one line per op as in
// tinygrad's helper_test_op. Every case of tests/fixtures/ops.safetensors (written by
// make_op_fixtures.py for the kernels) and of tests/fixtures/torch_ops.safetensors (written
// by make_torch_ops.py for what the first lacks: linear, matmul gradients, losses, batch
// norm's running statistics, broadcasting gradients, reductions) runs through ringflow's
// functional API with autograd; the output, the gradient of every input for which PyTorch
// stored one ("d<input>", for the stored upstream gradient "g") and every input updated in
// place ("<input>_after") must match: within 1e-4 on the cpu kernels in f32, within 1e-10
// on the reference kernels in f64 (see Deviation in torch_compare.h for "within").
// tests/fixtures/nonfinite.safetensors (make_nonfinite.py) feeds NaN, inf and -inf to every
// op and optimizer step; its cases run on the CUDA kernels' host-run bodies too, and must
// give NaN where PyTorch gives NaN and the same inf where it gives inf.
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "ringflow/kernels/simt/host_backend.h"
#include "ringflow/tests/torch_compare.h"

using namespace ringflow;
using json = nlohmann::json;
using ringflow::testing::check_close;
using ringflow::testing::load_torch_fixture;

namespace {

// Values below this are compared absolutely: the fixtures' tensors are of order 1.
constexpr double kFloor = 1e-3;

// One case of a fixture file, run in one dtype. Inputs are made on first use: floating
// ones converted to the run's dtype, leaves that require grad where PyTorch stored "d<role>".
class Case {
 public:
  Case(const SafetensorsFile& file, std::string name, json params, DType dtype)
      : file_(file), name_(std::move(name)), params_(std::move(params)), dtype_(dtype) {}

  const std::string& name() const { return name_; }
  const json& params() const { return params_; }
  bool has(const std::string& role) const { return file_.tensors.count(key(role)) != 0; }
  const Tensor& stored(const std::string& role) const { return file_.at(key(role)); }

  Tensor& in(const std::string& role) {
    auto it = inputs_.find(role);
    if (it != inputs_.end()) return it->second;
    Tensor t = stored(role);
    if (is_floating(t.dtype())) t = t.to(dtype_).clone();  // clone: never alias the file
    if (has("d" + role)) t.requires_grad_();
    return inputs_.emplace(role, t).first->second;
  }
  Tensor optional(const std::string& role) { return has(role) ? in(role) : Tensor(); }
  const std::map<std::string, Tensor>& inputs() const { return inputs_; }

  template <class T> T param(const char* key, T fallback) const {
    return params_.contains(key) ? params_.at(key).get<T>() : fallback;
  }
  std::array<int64_t, 2> pair(const char* key) const {
    const auto v = params_.at(key).get<std::vector<int64_t>>();
    return {v.at(0), v.at(1)};
  }

 private:
  std::string key(const std::string& role) const { return name_ + "." + role; }
  const SafetensorsFile& file_;
  std::string name_;
  json params_;
  DType dtype_;
  std::map<std::string, Tensor> inputs_;
};

Reduction reduction_of(const Case& c) {
  const std::string r = c.params().at("reduction").get<std::string>();
  if (r == "mean") return Reduction::mean;
  if (r == "sum") return Reduction::sum;
  REQUIRE_MESSAGE(r == "none", c.name() << ": unknown reduction " << r);
  return Reduction::none;
}

Tensor binary_op(const std::string& op, const Tensor& a, const Tensor& b) {
  if (op == "add") return add(a, b);
  if (op == "sub") return sub(a, b);
  if (op == "mul") return mul(a, b);
  if (op == "div") return div(a, b);
  if (op == "pow") return pow(a, b);
  if (op == "maximum") return maximum(a, b);
  if (op == "minimum") return minimum(a, b);
  FAIL("unknown binary op " << op);
  return {};
}

Tensor unary_op(const std::string& op, const Tensor& x) {
  static const std::map<std::string, Tensor (*)(const Tensor&)> ops = {
      {"neg", neg}, {"exp", exp}, {"log", log}, {"sqrt", sqrt}, {"abs", abs},
      {"relu", relu}, {"sigmoid", sigmoid}, {"tanh", tanh}};
  auto it = ops.find(op);
  REQUIRE_MESSAGE(it != ops.end(), "unknown unary op " << op);
  return it->second(x);
}

Tensor batch_norm_case(Case& c, bool training) {
  // In ops.safetensors, "mean"/"var" of a training case are the batch statistics (kernel
  // outputs); of an eval case, the running statistics.
  const Tensor rm = c.has("running_mean") ? c.in("running_mean")
                    : training            ? Tensor()
                                          : c.in("mean");
  const Tensor rv = c.has("running_var") ? c.in("running_var")
                    : training           ? Tensor()
                                         : c.in("var");
  return batch_norm(c.in("x"), rm, rv, c.optional("gamma"), c.optional("beta"), training,
                    c.param("momentum", 0.1), c.params().at("eps").get<double>());
}

// The parameter "p" after params "steps" optimizer steps, each taking gradient "grad<k>".
Tensor optimizer_case(Case& c, const std::string& kind) {
  Tensor p = c.in("p");
  p.requires_grad_();
  std::unique_ptr<optim::Optimizer> opt;
  if (kind == "sgd") {
    opt = std::make_unique<optim::SGD>(
        std::vector<Tensor>{p},
        optim::SGDOptions{.lr = c.param("lr", 0.0), .momentum = c.param("momentum", 0.0),
                          .weight_decay = c.param("weight_decay", 0.0)});
  } else {
    const optim::AdamOptions o{.lr = c.param("lr", 0.0), .beta1 = c.param("beta1", 0.0),
                               .beta2 = c.param("beta2", 0.0), .eps = c.param("eps", 0.0),
                               .weight_decay = c.param("weight_decay", 0.0)};
    if (c.param("decoupled", false)) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, o);
    else opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, o);
  }
  for (int k = 0; k < c.param("steps", 0); ++k) {
    p.set_grad(c.in("grad" + std::to_string(k)));
    opt->step();
  }
  return p.detach();
}

using Runner = std::function<Tensor(Case&)>;

// op -> how ringflow runs it. Ops of the fixtures that have no functional op (kernel-only
// cases) map to an empty Runner and are skipped.
const std::map<std::string, Runner>& runners() {
  static const std::map<std::string, Runner> table = {
      {"conv2d",
       [](Case& c) {
         // Padding may be asymmetric: (top, bottom, left, right).
         Conv2dParams p = conv2d_params(c.pair("stride"), /*padding=*/{0, 0}, c.pair("dilation"));
         const auto pad = c.params().at("pad").get<std::vector<int64_t>>();
         p.pad_top = pad.at(0);
         p.pad_bottom = pad.at(1);
         p.pad_left = pad.at(2);
         p.pad_right = pad.at(3);
         return conv2d(c.in("x"), c.in("w"), c.optional("b"), p);
       }},
      {"max_pool2d",
       [](Case& c) {
         return max_pool2d(c.in("x"), pool2d_params(c.pair("kernel"), c.pair("stride"),
                                                    c.pair("pad"), c.param("ceil_mode", false)));
       }},
      {"avg_pool2d",
       [](Case& c) {
         return avg_pool2d(c.in("x"),
                           pool2d_params(c.pair("kernel"), c.pair("stride"), c.pair("pad"),
                                         c.param("ceil_mode", false),
                                         c.param("count_include_pad", true)));
       }},
      {"adaptive_avg_pool2d",
       [](Case& c) {
         const Shape& y = c.stored("y").shape();
         return adaptive_avg_pool2d(c.in("x"), {y.at(2), y.at(3)});
       }},
      {"batch_norm_train", [](Case& c) { return batch_norm_case(c, /*training=*/true); }},
      {"batch_norm_eval", [](Case& c) { return batch_norm_case(c, /*training=*/false); }},
      {"softmax",
       [](Case& c) {
         const int64_t dim = c.params().at("dim").get<int64_t>();
         return c.param("log", false) ? log_softmax(c.in("x"), dim) : softmax(c.in("x"), dim);
       }},
      {"matmul", [](Case& c) { return matmul(c.in("a"), c.in("b")); }},
      {"linear", [](Case& c) { return linear(c.in("x"), c.in("w"), c.optional("b")); }},
      {"gather",
       [](Case& c) { return gather(c.in("x"), c.params().at("dim").get<int64_t>(), c.in("index")); }},
      {"scatter_add", Runner()},  // a kernel only (tests/reference_kernels_test.cpp)
      {"reduce",
       [](Case& c) {
         const std::string op = c.params().at("reduce").get<std::string>();
         const Shape dims = c.params().at("dims").get<Shape>();
         const bool keepdim = c.param("keepdim", true);  // ops.safetensors keeps dims
         const Tensor& x = c.in("x");
         if (op == "sum") return sum(x, dims, keepdim);
         if (op == "mean") return mean(x, dims, keepdim);
         if (op == "max") return amax(x, dims, keepdim);
         if (op == "min") return amin(x, dims, keepdim);
         if (op == "var") return var(x, dims, c.param<int64_t>("correction", 1), keepdim);
         REQUIRE_MESSAGE(op == "argmax", c.name() << ": unknown reduction " << op);
         return argmax(x, dims.at(0), keepdim);
       }},
      {"max_dim",
       [](Case& c) {
         return max(c.in("x"), c.params().at("dim").get<int64_t>(), c.param("keepdim", false));
       }},
      {"binary",
       [](Case& c) { return binary_op(c.params().at("binary"), c.in("a"), c.in("b")); }},
      {"scalar",
       [](Case& c) {
         const std::string op = c.params().at("binary");
         const double s = c.params().at("scalar").get<double>();
         if (op == "add") return add(c.in("a"), s);
         if (op == "sub") return sub(c.in("a"), s);
         if (op == "mul") return mul(c.in("a"), s);
         if (op == "div") return div(c.in("a"), s);
         REQUIRE_MESSAGE(op == "pow", c.name() << ": unknown scalar op " << op);
         return pow(c.in("a"), s);
       }},
      {"unary", [](Case& c) { return unary_op(c.params().at("unary"), c.in("x")); }},
      {"where", [](Case& c) { return where(c.in("cond"), c.in("a"), c.in("b")); }},
      {"cross_entropy",
       [](Case& c) {
         return cross_entropy(c.in("x"), c.in("target"), reduction_of(c),
                              c.param("label_smoothing", 0.0));
       }},
      {"nll_loss",
       [](Case& c) { return nll_loss(c.in("x"), c.in("target"), reduction_of(c)); }},
      {"mse_loss",
       [](Case& c) { return mse_loss(c.in("x"), c.in("target"), reduction_of(c)); }},
      {"sgd", [](Case& c) { return optimizer_case(c, "sgd"); }},
      {"adam", [](Case& c) { return optimizer_case(c, "adam"); }},
  };
  return table;
}

struct Tally {
  int cases = 0, skipped = 0, compared = 0;  // compared: tensors
  double worst = 0;
  std::string worst_what;
};

// Runs one case: forward, backward with the stored upstream gradient, then compares.
void run_case(const SafetensorsFile& file, const std::string& name, const json& params,
              DType dtype, double tol, const std::string& run, Tally& tally) {
  const std::string op = params.at("op").get<std::string>();
  auto it = runners().find(op);
  REQUIRE_MESSAGE(it != runners().end(),
                  name << ": op '" << op << "' has no runner in torch_ops_test.cpp");
  if (!it->second) {
    ++tally.skipped;
    return;
  }
  ++tally.cases;
  Case c(file, name, params, dtype);
  auto compare = [&](const Tensor& got, const std::string& role) {
    const std::string what = run + ": " + name + "." + role;
    const double d = check_close(got, c.stored(role), tol, kFloor, what);
    ++tally.compared;
    if (d > tally.worst || tally.worst_what.empty()) tally.worst = d, tally.worst_what = what;
  };
  Tensor y;
  try {
    y = it->second(c);
  } catch (const std::exception& e) {
    FAIL_CHECK(run << ": " << name << " threw: " << e.what());
    return;
  }
  compare(y, "y");
  if (c.has("g")) y.backward(c.stored("g").to(y.dtype()));
  // Every gradient and after-value PyTorch stored must have been checked.
  const std::string prefix = name + ".";
  for (const auto& [key, t] : file.tensors) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string role = key.substr(prefix.size());
    const bool grad = role.size() > 1 && role[0] == 'd' && c.has(role.substr(1));
    const std::string after = "_after";
    const bool updated = role.size() > after.size() &&
                         role.compare(role.size() - after.size(), after.size(), after) == 0;
    if (!grad && !updated) continue;
    const std::string input =
        grad ? role.substr(1) : role.substr(0, role.size() - after.size());
    auto used = c.inputs().find(input);
    if (used == c.inputs().end()) {
      FAIL_CHECK(run << ": " << name << ": the runner never used input '" << input
                     << "', for which PyTorch stored " << role);
      continue;
    }
    compare(grad ? used->second.grad() : used->second, role);
  }
}

void run_file(const std::string& fixture, const std::string& script, DType dtype, double tol,
              const std::string& run) {
  const SafetensorsFile file = load_torch_fixture(fixture, script);
  const json cases = json::parse(file.metadata.at("cases"));
  Tally tally;
  for (const auto& [name, params] : cases.items())
    run_case(file, name, params, dtype, tol, run, tally);
  MESSAGE(run << " on " << fixture << ": " << tally.cases << " cases (" << tally.skipped
              << " kernel-only skipped), " << tally.compared
              << " tensors compared; largest deviation " << tally.worst << " ("
              << tally.worst_what << ")");
  CHECK(tally.cases > 0);
}

}  // namespace

TEST_CASE("ops of ops.safetensors on the cpu kernels in f32") {
  run_file("ops.safetensors", "make_op_fixtures.py", DType::f32, 1e-4, "cpu f32");
}

TEST_CASE("ops of ops.safetensors on the reference kernels in f64") {
  ReferenceKernelsGuard reference;
  run_file("ops.safetensors", "make_op_fixtures.py", DType::f64, 1e-10, "reference f64");
}

TEST_CASE("ops of torch_ops.safetensors on the cpu kernels in f32") {
  run_file("torch_ops.safetensors", "make_torch_ops.py", DType::f32, 1e-4, "cpu f32");
}

TEST_CASE("ops of torch_ops.safetensors on the reference kernels in f64") {
  ReferenceKernelsGuard reference;
  run_file("torch_ops.safetensors", "make_torch_ops.py", DType::f64, 1e-10, "reference f64");
}

// NaN, inf and -inf through every op (issue 31): the same values as PyTorch's, NaN for NaN
// and inf for inf, on every table that runs CPU tensors, the CUDA kernels' bodies included.
TEST_CASE("non-finite values through the ops on the reference kernels in f64") {
  ReferenceKernelsGuard reference;
  run_file("nonfinite.safetensors", "make_nonfinite.py", DType::f64, 1e-10, "reference f64");
}

TEST_CASE("non-finite values through the ops on the cpu kernels in f32") {
  run_file("nonfinite.safetensors", "make_nonfinite.py", DType::f32, 1e-4, "cpu f32");
}

TEST_CASE("non-finite values through the ops on the CUDA kernels run on the host in f32") {
  KernelTableGuard simt(simt_host_backend());
  run_file("nonfinite.safetensors", "make_nonfinite.py", DType::f32, 1e-4, "simt host f32");
}
