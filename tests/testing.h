// Test helpers: closeness checks that print the first mismatches, seeded tensors, and a
// gradient check against central finite differences in f64 on the reference kernels.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ringflow/framework/ringflow.h"

namespace ringflow::testing {

inline std::string source_path(const std::string& relative) {
  return std::string(RINGFLOW_SOURCE_DIR) + "/" + relative;
}

// Seeded standard-normal tensor (f64 unless told otherwise).
inline Tensor seeded(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  Generator gen(seed);
  return randn(shape, &gen, dtype);
}

// |a - b| <= atol + rtol * |b| elementwise (b is the reference); reports the first few misses.
inline bool all_close(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
                      const std::string& what = "") {
  if (a.shape() != b.shape()) {
    MESSAGE(what << ": shape " << shape_str(a.shape()) << " != " << shape_str(b.shape()));
    return false;
  }
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  int misses = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool ok = (std::isnan(x[i]) && std::isnan(y[i])) ||
                    std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]);
    if (!ok && misses++ < 5)
      MESSAGE(what << ": element " << i << " of " << shape_str(a.shape()) << ": " << x[i]
                   << " vs reference " << y[i]);
  }
  return misses == 0;
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks the analytic gradient of sum(fn(inputs) * r), r random, against central differences
// for every input that requires grad. Runs on the reference kernels in f64.
inline bool check_grad(const Fn& fn, std::vector<Tensor> inputs, double eps = 1e-6,
                       double rtol = 1e-5, double atol = 1e-7) {
  ReferenceKernelsGuard reference;
  for (Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
  Tensor out = fn(inputs);
  const Tensor r = seeded(out.shape(), 12345, out.dtype());
  sum(mul(out, r)).backward();
  bool ok = true;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    REQUIRE_MESSAGE(x.dtype() == DType::f64, "check_grad needs f64 inputs");
    REQUIRE_MESSAGE(x.is_contiguous(), "check_grad needs contiguous inputs");
    const Tensor analytic = x.grad();
    if (!analytic.defined()) {
      MESSAGE("input " << i << ": no gradient reached it");
      ok = false;
      continue;
    }
    Tensor numeric = zeros(x.shape(), DType::f64);
    double* p = x.data<double>();
    double* n = numeric.data<double>();
    NoGradGuard no_grad;
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double saved = p[j];
      p[j] = saved + eps;
      const double plus = sum(mul(fn(inputs), r)).item();
      p[j] = saved - eps;
      const double minus = sum(mul(fn(inputs), r)).item();
      p[j] = saved;
      n[j] = (plus - minus) / (2 * eps);
    }
    ok = all_close(analytic, numeric, rtol, atol, "gradient of input " + std::to_string(i)) && ok;
  }
  return ok;
}

// A leaf f64 tensor that requires grad.
inline Tensor param(const Shape& shape, uint64_t seed) {
  Tensor t = seeded(shape, seed);
  t.requires_grad_();
  return t;
}

// Runs body when a CUDA device exists; otherwise prints why the test is skipped.
inline bool require_cuda() {
  std::string why;
  if (cuda_device_count(&why) > 0) return true;
  MESSAGE("SKIP (no CUDA device): " << why);
  return false;
}

// max |a - b| / max |b| over each pair of tensors, the largest (b is the reference).
inline double max_rel_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<double> x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    REQUIRE(x.size() == y.size());
    double diff = 0, scale = 1e-30;
    for (size_t k = 0; k < x.size(); ++k) {
      diff = std::max(diff, std::fabs(x[k] - y[k]));
      scale = std::max(scale, std::fabs(y[k]));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace ringflow::testing
