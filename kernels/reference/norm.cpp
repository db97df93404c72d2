// Batch normalization per channel (dim 1) over every other dim: (N, H, W) of a 4-D x or
// N of a 2-D x. Training uses the batch mean and the biased variance (two passes in
// double); backward is the training-mode gradient through those batch statistics.
#include <cmath>
#include <vector>

#include "ringflow/kernels/reference/reference_kernels.h"
#include "ringflow/kernels/reference/strided.h"

namespace ringflow::reference {

using strided::for_each_offset;
using strided::load_f64;
using strided::store_f64;

namespace {

int64_t channels(const View& x, const char* op) {
  check(x.dim() == 2 || x.dim() == 4, op, "x must be (N, C) or (N, C, H, W), got " +
                                              shape_str(x.shape));
  check_floating(x, op);
  return x.shape[1];
}

// Strides that map an element of x to its channel c (0 in every dim but dim 1).
Shape channel_strides(const View& x) {
  Shape s(x.dim(), 0);
  s[1] = 1;
  return s;
}

void check_per_channel(const View* v, int64_t C, const char* op, const char* what) {
  if (!v) return;
  check(v->dim() == 1 && v->shape[0] == C, op,
        std::string(what) + " must be (" + std::to_string(C) + "), got " + shape_str(v->shape));
}

double at(const View* v, int64_t c, double if_null) {
  return v ? load_f64(*v, c * v->strides[0]) : if_null;
}

// The operand checks of both forwards; the channel count.
int64_t check_forward(const char* op, const View& y, const View& x, const View& mean,
                      const View& var, const View* gamma, const View* beta) {
  const int64_t C = channels(x, op);
  check_same_shape(y, x, op);
  check_per_channel(&mean, C, op, "mean");
  check_per_channel(&var, C, op, "var");
  check_per_channel(gamma, C, op, "gamma");
  check_per_channel(beta, C, op, "beta");
  return C;
}

// y = (x - mu[c]) * invstd[c] * gamma[c] + beta[c].
void normalize(const View& y, const View& x, const std::vector<double>& mu,
               const std::vector<double>& invstd, const View* gamma, const View* beta) {
  for_each_offset(x.shape, [&](const auto& o) {
    const int64_t c = o[2];
    const double xhat = (load_f64(x, o[1]) - mu[c]) * invstd[c];
    store_f64(y, o[0], xhat * at(gamma, c, 1.0) + at(beta, c, 0.0));
  }, y.strides, x.strides, channel_strides(x));
}

}  // namespace

void batch_norm_forward_train(const View& y, const View& mean, const View& var,
                              const View& x, const View* gamma, const View* beta,
                              double eps) {
  const int64_t C = check_forward("batch_norm_forward_train", y, x, mean, var, gamma, beta);
  const double count = static_cast<double>(x.numel() / C);
  const Shape cs = channel_strides(x);

  std::vector<double> mu(C, 0.0), sq(C, 0.0);
  for_each_offset(x.shape, [&](const auto& o) { mu[o[1]] += load_f64(x, o[0]); }, x.strides, cs);
  for (double& m : mu) m /= count;
  for_each_offset(x.shape, [&](const auto& o) {
    const double d = load_f64(x, o[0]) - mu[o[1]];
    sq[o[1]] += d * d;
  }, x.strides, cs);
  std::vector<double> invstd(C);
  for (int64_t c = 0; c < C; ++c) {
    const double v = sq[c] / count;  // biased
    invstd[c] = 1.0 / std::sqrt(v + eps);
    store_f64(mean, c * mean.strides[0], mu[c]);
    store_f64(var, c * var.strides[0], v);
  }
  normalize(y, x, mu, invstd, gamma, beta);
}

void batch_norm_forward_eval(const View& y, const View& x, const View& mean, const View& var,
                             const View* gamma, const View* beta, double eps) {
  const int64_t C = check_forward("batch_norm_forward_eval", y, x, mean, var, gamma, beta);
  std::vector<double> mu(C), invstd(C);
  for (int64_t c = 0; c < C; ++c) {
    mu[c] = at(&mean, c, 0.0);
    invstd[c] = 1.0 / std::sqrt(at(&var, c, 0.0) + eps);
  }
  normalize(y, x, mu, invstd, gamma, beta);
}

void batch_norm_backward(const View& dx, const View* dgamma, const View* dbeta,
                         const View& dy, const View& x, const View& mean, const View& var,
                         const View* gamma, double eps) {
  const char* op = "batch_norm_backward";
  const int64_t C = channels(x, op);
  check_same_shape(dx, x, op);
  check_same_shape(dy, x, op);
  check_per_channel(&mean, C, op, "mean");
  check_per_channel(&var, C, op, "var");
  check_per_channel(gamma, C, op, "gamma");
  check_per_channel(dgamma, C, op, "dgamma");
  check_per_channel(dbeta, C, op, "dbeta");
  const double count = static_cast<double>(x.numel() / C);
  const Shape cs = channel_strides(x);
  std::vector<double> mu(C), invstd(C);
  for (int64_t c = 0; c < C; ++c) {
    mu[c] = at(&mean, c, 0.0);
    invstd[c] = 1.0 / std::sqrt(at(&var, c, 0.0) + eps);
  }
  // sum_dy = dbeta, sum_dy_xhat = dgamma
  std::vector<double> sum_dy(C, 0.0), sum_dy_xhat(C, 0.0);
  for_each_offset(x.shape, [&](const auto& o) {
    const int64_t c = o[2];
    const double g = load_f64(dy, o[0]);
    sum_dy[c] += g;
    sum_dy_xhat[c] += g * (load_f64(x, o[1]) - mu[c]) * invstd[c];
  }, dy.strides, x.strides, cs);
  // dx = gamma * invstd / M * (M * dy - sum(dy) - xhat * sum(dy * xhat))
  for_each_offset(x.shape, [&](const auto& o) {
    const int64_t c = o[3];
    const double xhat = (load_f64(x, o[1]) - mu[c]) * invstd[c];
    const double g = load_f64(dy, o[2]);
    store_f64(dx, o[0], at(gamma, c, 1.0) * invstd[c] / count *
                            (count * g - sum_dy[c] - xhat * sum_dy_xhat[c]));
  }, dx.strides, x.strides, dy.strides, cs);
  for (int64_t c = 0; c < C; ++c) {
    if (dgamma) store_f64(*dgamma, c * dgamma->strides[0], sum_dy_xhat[c]);
    if (dbeta) store_f64(*dbeta, c * dbeta->strides[0], sum_dy[c]);
  }
}

}  // namespace ringflow::reference
