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

// y = (x - mu[c]) * invstd[c] * gamma[c] + beta[c], then (when relu) relu(y + residual).
void normalize(const View& y, const View& x, const std::vector<double>& mu,
               const std::vector<double>& invstd, const View* gamma, const View* beta,
               bool relu = false, const View* residual = nullptr) {
  const Shape rs = residual ? residual->strides : Shape(x.dim(), 0);
  for_each_offset(x.shape, [&](const auto& o) {
    const int64_t c = o[3];
    const double xhat = (load_f64(x, o[1]) - mu[c]) * invstd[c];
    double v = xhat * at(gamma, c, 1.0) + at(beta, c, 0.0);
    if (residual) v += load_f64(*residual, o[2]);
    store_f64(y, o[0], relu && v < 0 ? 0.0 : v);
  }, y.strides, x.strides, rs, channel_strides(x));
}

// Batch statistics in double: mean and biased variance (stored), 1 / sqrt(var + eps).
void batch_stats(const View& x, const View& mean, const View& var, double eps, int64_t C,
                 std::vector<double>& mu, std::vector<double>& invstd) {
  const double count = static_cast<double>(x.numel() / C);
  const Shape cs = channel_strides(x);
  mu.assign(C, 0.0);
  std::vector<double> sq(C, 0.0);
  for_each_offset(x.shape, [&](const auto& o) { mu[o[1]] += load_f64(x, o[0]); }, x.strides, cs);
  for (double& m : mu) m /= count;
  for_each_offset(x.shape, [&](const auto& o) {
    const double d = load_f64(x, o[0]) - mu[o[1]];
    sq[o[1]] += d * d;
  }, x.strides, cs);
  invstd.assign(C, 0.0);
  for (int64_t c = 0; c < C; ++c) {
    const double v = sq[c] / count;  // biased
    invstd[c] = 1.0 / std::sqrt(v + eps);
    store_f64(mean, c * mean.strides[0], mu[c]);
    store_f64(var, c * var.strides[0], v);
  }
}

// The backward of normalize: dz = relu ? (y > 0 ? dy : 0) : dy (written to dresidual if
// given), then dx, dgamma, dbeta of the batch norm from dz.
void backward(const char* op, const View& dx, const View* dresidual, const View* dgamma,
              const View* dbeta, const View& dy, const View* y, const View& x, const View& mean,
              const View& var, const View* gamma, double eps) {
  const int64_t C = channels(x, op);
  check_same_shape(dx, x, op);
  check_same_shape(dy, x, op);
  if (y) check_same_shape(*y, x, op);
  if (dresidual) check_same_shape(*dresidual, x, op);
  check_per_channel(&mean, C, op, "mean");
  check_per_channel(&var, C, op, "var");
  check_per_channel(gamma, C, op, "gamma");
  check_per_channel(dgamma, C, op, "dgamma");
  check_per_channel(dbeta, C, op, "dbeta");
  const double count = static_cast<double>(x.numel() / C);
  const Shape cs = channel_strides(x), none(x.dim(), 0);
  std::vector<double> mu(C), invstd(C);
  for (int64_t c = 0; c < C; ++c) {
    mu[c] = at(&mean, c, 0.0);
    invstd[c] = 1.0 / std::sqrt(at(&var, c, 0.0) + eps);
  }
  const auto dz = [&](int64_t dy_offset, int64_t y_offset) {
    return y && !(load_f64(*y, y_offset) > 0) ? 0.0 : load_f64(dy, dy_offset);
  };
  // sum_dz = dbeta, sum_dz_xhat = dgamma
  std::vector<double> sum_dy(C, 0.0), sum_dy_xhat(C, 0.0);
  for_each_offset(x.shape, [&](const auto& o) {
    const int64_t c = o[3];
    const double g = dz(o[0], o[2]);
    sum_dy[c] += g;
    sum_dy_xhat[c] += g * (load_f64(x, o[1]) - mu[c]) * invstd[c];
  }, dy.strides, x.strides, y ? y->strides : none, cs);
  // dx = gamma * invstd / M * (M * dz - sum(dz) - xhat * sum(dz * xhat))
  for_each_offset(x.shape, [&](const auto& o) {
    const int64_t c = o[4];
    const double xhat = (load_f64(x, o[1]) - mu[c]) * invstd[c];
    const double g = dz(o[2], o[3]);
    store_f64(dx, o[0], at(gamma, c, 1.0) * invstd[c] / count *
                            (count * g - sum_dy[c] - xhat * sum_dy_xhat[c]));
  }, dx.strides, x.strides, dy.strides, y ? y->strides : none, cs);
  if (dresidual)
    for_each_offset(x.shape, [&](const auto& o) { store_f64(*dresidual, o[0], dz(o[1], o[2])); },
                    dresidual->strides, dy.strides, y ? y->strides : none);
  for (int64_t c = 0; c < C; ++c) {
    if (dgamma) store_f64(*dgamma, c * dgamma->strides[0], sum_dy_xhat[c]);
    if (dbeta) store_f64(*dbeta, c * dbeta->strides[0], sum_dy[c]);
  }
}

}  // namespace

void batch_norm_forward_train(const View& y, const View& mean, const View& var,
                              const View& x, const View* gamma, const View* beta,
                              double eps) {
  const int64_t C = check_forward("batch_norm_forward_train", y, x, mean, var, gamma, beta);
  std::vector<double> mu, invstd;
  batch_stats(x, mean, var, eps, C, mu, invstd);
  normalize(y, x, mu, invstd, gamma, beta);
}

void batch_norm_relu_forward_train(const View& y, const View& mean, const View& var,
                                   const View& x, const View* gamma, const View* beta,
                                   const View* residual, double eps) {
  const char* op = "batch_norm_relu_forward_train";
  const int64_t C = check_forward(op, y, x, mean, var, gamma, beta);
  if (residual) check_same_shape(*residual, x, op);
  std::vector<double> mu, invstd;
  batch_stats(x, mean, var, eps, C, mu, invstd);
  normalize(y, x, mu, invstd, gamma, beta, /*relu=*/true, residual);
}

void batch_norm_update_stats(const View* running_mean, const View* running_var,
                             const View* num_batches_tracked, const View& mean, const View& var,
                             double momentum, int64_t count) {
  const char* op = "batch_norm_update_stats";
  check(mean.dim() == 1 && var.shape == mean.shape, op, "mean " + shape_str(mean.shape) + " and var " +
                                                            shape_str(var.shape) + " must be one vector each");
  const int64_t C = mean.shape[0];
  check_per_channel(running_mean, C, op, "running_mean");
  check_per_channel(running_var, C, op, "running_var");
  check(!num_batches_tracked || (num_batches_tracked->numel() == 1 && num_batches_tracked->dtype == DType::i64),
        op, "num_batches_tracked must be one i64");
  check(count > 1, op, "needs more than one element per channel, got " + std::to_string(count));
  double batches = 0;
  if (num_batches_tracked) {
    int64_t* n = static_cast<int64_t*>(num_batches_tracked->data);
    batches = static_cast<double>(++*n);
  }
  check(momentum >= 0 || batches > 0, op, "a cumulative average (momentum < 0) needs num_batches_tracked");
  const double f = momentum >= 0 ? momentum : 1.0 / batches;
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  for (int64_t c = 0; c < C; ++c) {
    if (running_mean)
      store_f64(*running_mean, c * running_mean->strides[0],
                (1 - f) * at(running_mean, c, 0.0) + f * at(&mean, c, 0.0));
    if (running_var)
      store_f64(*running_var, c * running_var->strides[0],
                (1 - f) * at(running_var, c, 0.0) + f * at(&var, c, 0.0) * unbias);
  }
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
  backward("batch_norm_backward", dx, nullptr, dgamma, dbeta, dy, nullptr, x, mean, var, gamma, eps);
}

void batch_norm_relu_backward(const View& dx, const View* dresidual, const View* dgamma,
                              const View* dbeta, const View& dy, const View& y, const View& x,
                              const View& mean, const View& var, const View* gamma, double eps) {
  backward("batch_norm_relu_backward", dx, dresidual, dgamma, dbeta, dy, &y, x, mean, var, gamma, eps);
}

}  // namespace ringflow::reference
