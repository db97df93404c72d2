// bench/kernels --device cuda: conv forward at the VGG-11 CIFAR layer shapes and sgemm
// 2048^3 on the GPU, each through ringflow's op path (conv2d / matmul on CUDA tensors) and
// through raw library calls made here (cuDNN with the algorithm cudnnFind measures fastest,
// cuBLAS sgemm), same shapes, NCHW, f32 (TF32 only with --tf32, on both). Every row checks
// the op path's output against raw once, then times both alternately: each call ends in a
// device synchronisation, the median of --repeat calls is reported.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuDNN 9's legacy conv API

#include <cublas_v2.h>
#include <cudnn.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "ringflow/bench/kernels_cuda.h"
#include "ringflow/framework/ringflow.h"

namespace ringflow::bench {
namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("bench/kernels --device cuda: " + what);
}
#define BENCH_CUDNN(call) check((call) == CUDNN_STATUS_SUCCESS, #call)
#define BENCH_CUBLAS(call) check((call) == CUBLAS_STATUS_SUCCESS, #call)

double median_ms(const std::function<void()>& fn, const Device& d, int repeat) {
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    synchronize(d);
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    synchronize(d);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  return diff / scale;
}

void* ptr(const Tensor& t) { return t.kernel_view().data; }

struct Row {
  std::string op, shape;
  double gflop, raw_ms, op_ms, check;
};

// Raw cuDNN forward (NCHW, f32, pad 1, stride 1): descriptors, the fastest measured
// algorithm, its workspace; each call one cudnnConvolutionForward + cudnnAddTensor.
Row conv_row(cudnnHandle_t h, int64_t N, int64_t C, int64_t K, int64_t HW, bool tf32, int repeat) {
  const Device d = Device::cuda();
  Generator gen(1);
  const Tensor x = randn({N, C, HW, HW}, &gen).to(d), w = randn({K, C, 3, 3}, &gen).to(d);
  const Tensor b = randn({K}, &gen).to(d), y_raw = empty({N, K, HW, HW}, DType::f32, d);
  cudnnTensorDescriptor_t xd, yd, bd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  BENCH_CUDNN(cudnnCreateTensorDescriptor(&xd));
  BENCH_CUDNN(cudnnCreateTensorDescriptor(&yd));
  BENCH_CUDNN(cudnnCreateTensorDescriptor(&bd));
  BENCH_CUDNN(cudnnCreateFilterDescriptor(&wd));
  BENCH_CUDNN(cudnnCreateConvolutionDescriptor(&cd));
  const int n = static_cast<int>(N), c = static_cast<int>(C), k = static_cast<int>(K), hw = static_cast<int>(HW);
  BENCH_CUDNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hw, hw));
  BENCH_CUDNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, hw, hw));
  BENCH_CUDNN(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, k, 1, 1));
  BENCH_CUDNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, 3, 3));
  BENCH_CUDNN(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  BENCH_CUDNN(cudnnSetConvolutionMathType(cd, tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  const size_t limit = size_t{1} << 30;
  const Tensor ws = empty({static_cast<int64_t>(limit / 4)}, DType::f32, d);
  cudnnConvolutionFwdAlgoPerf_t perf[16];
  int found = 0;
  BENCH_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(h, xd, ptr(x), wd, ptr(w), cd, yd, ptr(y_raw), 16, &found,
                                                     perf, ptr(ws), limit));
  int best = -1;
  for (int i = 0; i < found; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= limit &&
        (tf32 || perf[i].mathType == CUDNN_FMA_MATH) && (best < 0 || perf[i].time < perf[best].time))
      best = i;
  check(best >= 0, "cuDNN found no algorithm");
  BENCH_CUDNN(cudnnSetConvolutionMathType(cd, perf[best].mathType));
  const float one = 1, zero = 0;
  const auto raw = [&] {
    BENCH_CUDNN(cudnnConvolutionForward(h, &one, xd, ptr(x), wd, ptr(w), cd, perf[best].algo, ptr(ws),
                                        perf[best].memory, &zero, yd, ptr(y_raw)));
    BENCH_CUDNN(cudnnAddTensor(h, &one, bd, ptr(b), &one, yd, ptr(y_raw)));
  };
  const Conv2dParams p{.pad_top = 1, .pad_bottom = 1, .pad_left = 1, .pad_right = 1};
  Tensor y_op;
  const auto op = [&] { y_op = {}, y_op = conv2d(x, w, b, p); };
  raw();
  op();
  const double diff = max_rel_diff(y_op, y_raw);
  double raw_ms = 0, op_ms = 0;
  for (int round = 0; round < 2; ++round) {  // alternate, keep the second (warm) round
    raw_ms = median_ms(raw, d, repeat);
    op_ms = median_ms(op, d, repeat);
  }
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyTensorDescriptor(bd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  return {"conv_fwd", fmt::format("N{} {}->{} {}x{} 3x3", N, C, K, HW, HW),
          2.0 * N * K * HW * HW * C * 9 / 1e9, raw_ms, op_ms, diff};
}

// Raw cuBLAS sgemm (row-major C = A B as column-major C^T = B^T A^T).
Row sgemm_row(cublasHandle_t h, int64_t M, int64_t K, int64_t N, bool tf32, int repeat) {
  const Device d = Device::cuda();
  Generator gen(2);
  const Tensor a = randn({M, K}, &gen).to(d), b = randn({K, N}, &gen).to(d);
  const Tensor c_raw = empty({M, N}, DType::f32, d);
  BENCH_CUBLAS(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const float one = 1, zero = 0;
  const int m = static_cast<int>(M), k = static_cast<int>(K), n = static_cast<int>(N);
  const auto raw = [&] {
    BENCH_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, static_cast<const float*>(ptr(b)), n,
                             static_cast<const float*>(ptr(a)), k, &zero, static_cast<float*>(ptr(c_raw)), n));
  };
  Tensor c_op;
  const auto op = [&] { c_op = {}, c_op = matmul(a, b); };
  raw();
  op();
  const double diff = max_rel_diff(c_op, c_raw);
  double raw_ms = 0, op_ms = 0;
  for (int round = 0; round < 2; ++round) {
    raw_ms = median_ms(raw, d, repeat);
    op_ms = median_ms(op, d, repeat);
  }
  return {"matmul", fmt::format("{}x{}x{}", M, K, N), 2.0 * M * K * N / 1e9, raw_ms, op_ms, diff};
}

}  // namespace

int run_cuda_kernels(const std::vector<int64_t>& batches, int repeat, bool tf32) {
  std::string why;
  const int count = cuda_device_count(&why);
  check(count > 0, "no usable CUDA device (" + why + ")");
  set_cuda_device(0);
  set_allow_tf32(tf32);
  NoGradGuard no_grad;
  cudnnHandle_t dnn;
  cublasHandle_t blas;
  BENCH_CUDNN(cudnnCreate(&dnn));
  BENCH_CUBLAS(cublasCreate(&blas));
  std::vector<Row> rows{sgemm_row(blas, 2048, 2048, 2048, tf32, repeat)};
  const std::vector<std::array<int64_t, 3>> vgg = {{3, 64, 32},  {64, 128, 16}, {128, 256, 8}, {256, 256, 8},
                                                   {256, 512, 4}, {512, 512, 4}, {512, 512, 2}};
  for (int64_t N : batches)
    for (const auto& [C, K, HW] : vgg) rows.push_back(conv_row(dnn, N, C, K, HW, tf32, repeat));
  fmt::print("device cuda:0  f32{}  (raw: cuDNN / cuBLAS called here; op: ringflow's conv2d / matmul)\n",
             tf32 ? " with TF32" : ", no TF32");
  fmt::print("{:<10} {:<22} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9}\n", "op", "shape", "raw ms", "TFLOP/s", "op ms",
             "TFLOP/s", "op/raw", "check");
  bool ok = true;
  for (const Row& r : rows) {
    fmt::print("{:<10} {:<22} {:>9.3f} {:>9.2f} {:>9.3f} {:>9.2f} {:>7.2f} {:>9.1e}\n", r.op, r.shape, r.raw_ms,
               r.gflop / r.raw_ms, r.op_ms, r.gflop / r.op_ms, r.op_ms / r.raw_ms, r.check);
    ok &= r.check < (tf32 ? 1e-2 : 1e-4);
  }
  return ok ? 0 : 1;
}

}  // namespace ringflow::bench

#pragma GCC diagnostic pop
