// Comparing ringflow's results with PyTorch's, as stored by tests/fixtures/make_*.py in
// safetensors files read with ringflow's own loader (framework/serialize.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "ringflow/framework/serialize.h"
#include "ringflow/tests/testing.h"

namespace ringflow::testing {

// tests/fixtures/<name>; a missing file fails the test naming the script that writes it.
inline SafetensorsFile load_torch_fixture(const std::string& name, const std::string& script) {
  const std::string path = source_path("tests/fixtures/" + name);
  REQUIRE_MESSAGE(std::filesystem::exists(path),
                  "missing fixture " << path << ": write it with `/usr/bin/python3 tests/fixtures/"
                                     << script << "` (Debian's python3-torch) and commit it");
  return load_safetensors(path);
}

// Error of `got` against the reference `want`, elementwise
//   |got - want| / max(|want|, kScaleFraction * max |want|, floor):
// relative for the larger values of a tensor; the smaller ones are judged against a tenth
// of the largest (or `floor`), as in f32 a sum whose terms cancel keeps the absolute error
// of its terms (a weight gradient of 1e-3 among gradients of 1 is good to ~1e-7, not 1e-10),
// and a gradient that is 0 in exact arithmetic is rounding noise. Non-finite values must
// be the same: NaN where PyTorch has NaN, inf of the same sign where it has inf (the error
// is then 0, else infinite); the scale is taken over the finite ones.
constexpr double kScaleFraction = 0.1;

struct Deviation {
  double max_error = 0;  // the largest elementwise error
  int64_t worst = -1;    // where (row-major index); -1 when got is empty
  double got = 0, want = 0;
};

inline Deviation deviation(const Tensor& got, const Tensor& want, double floor) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = floor;
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, kScaleFraction * std::fabs(v));
  Deviation d;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    double e = 0;
    if (std::isfinite(g[i]) && std::isfinite(w[i])) {
      e = std::fabs(g[i] - w[i]) / std::max(std::fabs(w[i]), scale);
    } else if (!(std::isnan(g[i]) && std::isnan(w[i])) && g[i] != w[i]) {
      e = INFINITY;
    }
    if (d.worst < 0 || e > d.max_error) d = {e, static_cast<int64_t>(i), g[i], w[i]};
  }
  return d;
}

// Checks shape and deviation <= tol, naming `what`, the worst element and both values.
// Returns the deviation so that callers can report the largest one they saw.
inline double check_close(const Tensor& got, const Tensor& want, double tol, double floor,
                          const std::string& what) {
  if (!got.defined()) {
    CHECK_MESSAGE(false, what << ": no tensor (no gradient reached it?)");
    return INFINITY;
  }
  if (got.shape() != want.shape()) {
    CHECK_MESSAGE(false, what << ": shape " << shape_str(got.shape()) << " but PyTorch's is "
                              << shape_str(want.shape()));
    return INFINITY;
  }
  const Deviation d = deviation(got, want, floor);
  CHECK_MESSAGE(d.max_error <= tol, what << ": deviation " << d.max_error << " > " << tol
                                         << " at element " << d.worst << " of "
                                         << shape_str(want.shape()) << ": " << d.got
                                         << " vs PyTorch's " << d.want);
  return d.max_error;
}

}  // namespace ringflow::testing
