// bench/kernels --device cuda. For each distinct convolution layer of the models (one row per
// pass, the layer's count of same-shaped layers beside it):
//   op:    ringflow's conv2d on CUDA tensors, as in training: forward with w (and b) requiring
//          grad; backward-data and backward-weights as y.backward(dy) on a graph recorded once
//          with only x, or only w and b, requiring grad (leaves' .grad reset to none first).
//          Weights are contiguous OIHW as a model's are; activations in the memory format.
//   raw:   the same cuDNN call made here: legacy descriptors in the chosen layout (the filter
//          too, reordered once outside the timing, as ringflow caches it), f32 accumulation,
//          tensor-op math for 16-bit (and f32 with --tf32), the fastest algorithm that
//          cudnnFind*AlgorithmEx measures within a 1 GiB workspace, kept for the timing.
//          Bias: cudnnAddTensor after the forward, cudnnConvolutionBackwardBias with the weights.
//   torch: bench/torch_conv_layers.py on the same layers, dtype and layout (cudnn.benchmark).
// op and raw are timed alternately (a round of each, twice, the second kept); every call ends
// in a device synchronisation and the median of --repeat calls is reported. Each row checks
// op's result against raw's once. Totals per model weigh each layer by its count.
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
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "ringflow/bench/command_output.h"
#include "ringflow/bench/conv_layers.h"
#include "ringflow/bench/conv_table.h"
#include "ringflow/bench/kernels_cuda.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/kernels/cuda/cudnn_conv_plan.h"
#include "ringflow/kernels/cuda_memory.h"
#include "ringflow/kernels/cudnn_choices.h"

namespace ringflow::bench {
namespace {

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("bench/kernels --device cuda: " + what);
}
#define BENCH_CUDNN(call) check((call) == CUDNN_STATUS_SUCCESS, #call)
#define BENCH_CUBLAS(call) check((call) == CUBLAS_STATUS_SUCCESS, #call)
#define BENCH_CUDA(call) check((call) == cudaSuccess, #call)

using Call = std::function<void()>;

// Median ms of `repeat` calls of fn, each between two device synchronisations.
double median_ms(const Call& fn, const Device& d, int repeat) {
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

// (raw ms, op ms): warm-up, then two rounds of each alternately, the second kept.
std::array<double, 2> time_pair(const Call& raw, const Call& op, const Device& d, const CudaKernelOptions& o) {
  for (int i = 0; i < o.warmup; ++i) raw(), op();
  std::array<double, 2> ms{};
  for (int round = 0; round < 2; ++round) ms = {median_ms(raw, d, o.repeat), median_ms(op, d, o.repeat)};
  return ms;
}

// rms(a - b) / rms(b) over the pairs, worst pair, computed on the device in f32 (the tensors
// are up to hundreds of millions of elements).
double rel_rms(const std::vector<std::pair<Tensor, Tensor>>& pairs) {
  const NoGradGuard no_grad;
  double worst = 0;
  for (const auto& [a, b] : pairs) {
    if (a.shape() != b.shape()) return INFINITY;
    const Tensor x = a.to(DType::f32), y = b.to(DType::f32), d = sub(x, y);
    const double err = sum(mul(d, d)).item(), norm = sum(mul(y, y)).item();
    worst = std::max(worst, std::sqrt(err / std::max(norm, 1e-300)));
  }
  return worst;
}

void* ptr(const Tensor& t) { return t.kernel_view().data; }

cudnnDataType_t data_type(DType d) {
  switch (d) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: throw std::invalid_argument(std::string("--dtype ") + dtype_name(d) + ": f32, f16 or bf16");
  }
}

int as_int(int64_t v) { return static_cast<int>(v); }

// ---------------------------------------------------------------- raw cuDNN
constexpr size_t kWorkspace = size_t{1} << 30;  // bytes, as ringflow's limit

// One layer's descriptors in one layout, and the workspace the algorithms share.
class RawConv {
 public:
  RawConv(cudnnHandle_t h, const ConvLayer& l, DType dtype, bool nhwc, bool tf32)
      : h_(h), dtype_(dtype), tensor_ops_(dtype != DType::f32 || tf32), tf32_(tf32) {
    const cudnnTensorFormat_t f = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const cudnnDataType_t t = data_type(dtype);
    BENCH_CUDNN(cudnnCreateTensorDescriptor(&x_));
    BENCH_CUDNN(cudnnCreateTensorDescriptor(&y_));
    BENCH_CUDNN(cudnnCreateTensorDescriptor(&b_));
    BENCH_CUDNN(cudnnCreateFilterDescriptor(&w_));
    BENCH_CUDNN(cudnnCreateConvolutionDescriptor(&c_));
    BENCH_CUDNN(cudnnSetTensor4dDescriptor(x_, f, t, as_int(l.x[0]), as_int(l.x[1]), as_int(l.x[2]), as_int(l.x[3])));
    BENCH_CUDNN(cudnnSetTensor4dDescriptor(y_, f, t, as_int(l.y[0]), as_int(l.y[1]), as_int(l.y[2]), as_int(l.y[3])));
    BENCH_CUDNN(cudnnSetTensor4dDescriptor(b_, CUDNN_TENSOR_NCHW, t, 1, as_int(l.w[0]), 1, 1));
    BENCH_CUDNN(cudnnSetFilter4dDescriptor(w_, t, f, as_int(l.w[0]), as_int(l.w[1]), as_int(l.w[2]), as_int(l.w[3])));
    const Conv2dParams& p = l.params;
    check(p.pad_top == p.pad_bottom && p.pad_left == p.pad_right, "asymmetric padding in " + l.name());
    BENCH_CUDNN(cudnnSetConvolution2dDescriptor(c_, as_int(p.pad_top), as_int(p.pad_left), as_int(p.stride_h),
                                                as_int(p.stride_w), as_int(p.dilation_h), as_int(p.dilation_w),
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BENCH_CUDNN(cudnnSetConvolutionMathType(c_, tensor_ops_ ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }
  ~RawConv() {
    cudnnDestroyTensorDescriptor(x_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyTensorDescriptor(b_);
    cudnnDestroyFilterDescriptor(w_);
    cudnnDestroyConvolutionDescriptor(c_);
  }
  RawConv(const RawConv&) = delete;
  RawConv& operator=(const RawConv&) = delete;

  // The pass as one call on these buffers (x, w, y: dx / dw / dy as the pass has them; b: the
  // bias or its gradient, may be undefined), its algorithm found first on them.
  Call call(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& b, const Tensor& ws) {
    const Found f = find(pass, x, w, y, ws);
    return [=, this] {
      const float one = 1, zero = 0;
      BENCH_CUDNN(cudnnSetConvolutionMathType(c_, f.math));
      switch (pass) {
        case Pass::forward:
          BENCH_CUDNN(cudnnConvolutionForward(h_, &one, x_, ptr(x), w_, ptr(w), c_,
                                              static_cast<cudnnConvolutionFwdAlgo_t>(f.algo), ptr(ws), f.workspace,
                                              &zero, y_, ptr(y)));
          if (b.defined()) BENCH_CUDNN(cudnnAddTensor(h_, &one, b_, ptr(b), &one, y_, ptr(y)));
          return;
        case Pass::backward_data:
          BENCH_CUDNN(cudnnConvolutionBackwardData(h_, &one, w_, ptr(w), y_, ptr(y), c_,
                                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(f.algo), ptr(ws),
                                                   f.workspace, &zero, x_, ptr(x)));
          return;
        case Pass::backward_weights:
          BENCH_CUDNN(cudnnConvolutionBackwardFilter(h_, &one, x_, ptr(x), y_, ptr(y), c_,
                                                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(f.algo), ptr(ws),
                                                     f.workspace, &zero, w_, ptr(w)));
          if (b.defined()) BENCH_CUDNN(cudnnConvolutionBackwardBias(h_, &one, y_, ptr(y), &zero, b_, ptr(b)));
          return;
      }
    };
  }

 private:
  struct Found {
    int algo;
    cudnnMathType_t math;
    size_t workspace;
  };

  template <class Perf>
  Found best(const Perf* perf, int n, const std::string& what) const {
    std::vector<cuda::ConvCandidate> c;
    for (int i = 0; i < n; ++i) {
      cuda::ConvCandidate k;
      k.algo = static_cast<int>(perf[i].algo);
      k.ok = perf[i].status == CUDNN_STATUS_SUCCESS;
      k.math = perf[i].mathType == CUDNN_FMA_MATH ? cuda::ConvMath::fma
               : perf[i].mathType == CUDNN_DEFAULT_MATH ? cuda::ConvMath::default_math
                                                        : cuda::ConvMath::tensor_ops;
      k.time_ms = perf[i].time;
      k.workspace = perf[i].memory;
      k.index = i;
      c.push_back(k);
    }
    const auto chosen = cuda::choose_algorithm(c.data(), n, dtype_, tf32_, kWorkspace);
    check(chosen.has_value(), "cuDNN found no algorithm for " + what + ": " +
                                  cuda::describe_candidates(c.data(), n));
    return {chosen->algo, perf[chosen->index].mathType, chosen->workspace};
  }

  Found find(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& ws) const {
    int n = 0;
    switch (pass) {
      case Pass::forward: {
        cudnnConvolutionFwdAlgoPerf_t r[16];
        BENCH_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(h_, x_, ptr(x), w_, ptr(w), c_, y_, ptr(y), 16, &n, r,
                                                           ptr(ws), kWorkspace));
        return best(r, n, pass_name(pass));
      }
      case Pass::backward_data: {
        cudnnConvolutionBwdDataAlgoPerf_t r[16];
        BENCH_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(h_, w_, ptr(w), y_, ptr(y), c_, x_, ptr(x), 16, &n,
                                                                r, ptr(ws), kWorkspace));
        return best(r, n, pass_name(pass));
      }
      case Pass::backward_weights: {
        cudnnConvolutionBwdFilterAlgoPerf_t r[16];
        BENCH_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(h_, x_, ptr(x), y_, ptr(y), c_, w_, ptr(w), 16,
                                                                  &n, r, ptr(ws), kWorkspace));
        return best(r, n, pass_name(pass));
      }
    }
    return {};
  }

  cudnnHandle_t h_;
  DType dtype_;
  bool tensor_ops_, tf32_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, b_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t c_ = nullptr;
};

// ---------------------------------------------------------------- rows
// An activation (N, C, H, W) on the device in `dtype`, NHWC in memory when `nhwc`: normal
// values drawn on the host for one sample, repeated over the batch on the device (ResNet-50's
// layers at batch 256 hold up to 2e8 elements: too many to draw on the host per layer).
Tensor device_activation(const Shape& shape, DType dtype, bool nhwc, Generator& gen) {
  const Tensor t = randn({1, shape[1], shape[2], shape[3]}, &gen).to(dtype).to(Device::cuda()).expand(shape);
  return nhwc ? t.channels_last() : t.contiguous();
}

// The three rows of one layer (backward-data too for the first layer: a model skips it there,
// but the call exists and is timed alike).
std::vector<ConvRow> layer_rows(cudnnHandle_t h, const std::string& model, const ConvLayer& l, bool nhwc,
                                const CudaKernelOptions& o) {
  const Device d = Device::cuda();
  Generator gen(1);
  const Tensor x = device_activation(l.x, o.dtype, nhwc, gen), dy = device_activation(l.y, o.dtype, nhwc, gen);
  const Tensor w = randn(l.w, &gen).to(o.dtype).to(d);  // a model's weight: OIHW
  const Tensor w_raw = nhwc ? w.channels_last() : w;   // raw's filter in the call's layout
  const Tensor b = l.bias ? randn({l.w[0]}, &gen).to(o.dtype).to(d) : Tensor();
  const Tensor ws = empty({static_cast<int64_t>(kWorkspace / 4)}, DType::f32, d);
  RawConv raw(h, l, o.dtype, nhwc, o.tf32);
  const double tolerance = o.dtype == DType::f32 && !o.tf32 ? 1e-4 : 1e-2;
  const auto like = [&](const Tensor& t) {
    return t.is_channels_last() && !t.is_contiguous() ? empty_channels_last(t.shape(), o.dtype, d)
                                                      : empty(t.shape(), o.dtype, d);
  };
  // raw's call, or none where cuDNN's search found no algorithm (the row then times op alone,
  // its reason on stderr).
  const auto raw_call = [&](Pass pass, const Tensor& a, const Tensor& f, const Tensor& c, const Tensor& bias) -> Call {
    try {
      return raw.call(pass, a, f, c, bias, ws);
    } catch (const std::runtime_error& e) {
      fmt::print(stderr, "kernels: {} {}: no raw cuDNN row ({})\n", l.name(), pass_name(pass), e.what());
      return {};
    }
  };
  std::vector<ConvRow> rows;
  const auto add = [&](Pass pass, const Call& raw_fn, const Call& op_call,
                       const std::function<std::vector<std::pair<Tensor, Tensor>>()>& results) {
    ConvRow r{model, l, pass};
    r.tolerance = tolerance;
    Call raw_run = raw_fn;
    if (raw_run) try {
        raw_run();
      } catch (const std::runtime_error& e) {  // e.g. a bias gradient cuDNN does not support
        fmt::print(stderr, "kernels: {} {}: no raw cuDNN row ({})\n", l.name(), pass_name(pass), e.what());
        raw_run = {};
      }
    if (!raw_run) {
      r.op_ms = time_pair(op_call, op_call, d, o)[1];
      rows.push_back(r);
      return;
    }
    op_call();
    r.check = rel_rms(results());
    const auto [raw_ms, op_ms] = time_pair(raw_run, op_call, d, o);
    r.raw_ms = raw_ms;
    r.op_ms = op_ms;
    rows.push_back(r);
  };
  {  // forward, w and b requiring grad as in training
    const Tensor wl = w.detach().requires_grad_(), bl = b.defined() ? b.detach().requires_grad_() : Tensor();
    const Tensor y_raw = like(dy);
    Tensor y_op;
    add(Pass::forward, raw_call(Pass::forward, x, w_raw, y_raw, b),
        [&] { y_op = {}, y_op = conv2d(x, wl, bl, l.params); }, [&] { return std::vector{std::pair{y_op, y_raw}}; });
  }
  {  // backward-data: only x requires grad
    const Tensor xl = x.detach().requires_grad_();
    const Tensor y = conv2d(xl, w, b, l.params), dx_raw = like(x);
    add(Pass::backward_data, raw_call(Pass::backward_data, dx_raw, w_raw, dy, Tensor()),
        [&] { xl.set_grad(Tensor()), y.backward(dy, /*retain_graph=*/true); },
        [&] { return std::vector{std::pair{xl.grad(), dx_raw}}; });
  }
  {  // backward-weights: only w and b require grad
    const Tensor wl = w.detach().requires_grad_(), bl = b.defined() ? b.detach().requires_grad_() : Tensor();
    const Tensor y = conv2d(x, wl, bl, l.params), dw_raw = like(w_raw);
    const Tensor db_raw = b.defined() ? empty(b.shape(), o.dtype, d) : Tensor();
    add(Pass::backward_weights, raw_call(Pass::backward_weights, x, dw_raw, dy, db_raw),
        [&] {
          wl.set_grad(Tensor());
          if (bl.defined()) bl.set_grad(Tensor());
          y.backward(dy, /*retain_graph=*/true);
        },
        [&] {
          std::vector<std::pair<Tensor, Tensor>> p{{wl.grad(), dw_raw}};
          if (bl.defined()) p.emplace_back(bl.grad(), db_raw);
          return p;
        });
  }
  return rows;
}

// ---------------------------------------------------------------- PyTorch
// bench/torch_conv_layers.py's times for the model's rows (matched by shape); a row keeps NaN
// where it gave none (the reason on stderr).
void add_torch(std::vector<ConvRow>& rows, const std::string& model, bool nhwc, const CudaKernelOptions& o) {
  const std::string cmd = fmt::format("{} '{}' --model {} --batch {} --dtype {} --memory-format {}{} --warmup {} --repeat {}",
                                      o.python, o.torch_script, model, o.batch, dtype_name(o.dtype),
                                      nhwc ? "nhwc" : "nchw", o.tf32 ? " --tf32" : "", o.warmup, o.repeat);
  cuda_empty_cache();  // the blocks ringflow's allocator keeps go back to the device for PyTorch
  const std::optional<std::string> out = command_output(cmd, "kernels");
  if (!out) return;
  if (const size_t matched = attach_torch_times(rows, model, *out); matched != rows.size())
    fmt::print(stderr, "kernels: PyTorch timed {} of ringflow's {} rows of {}: the layer lists differ (see "
               "tests/conv_layers_test.py)\n", matched, rows.size(), model);
}

// ---------------------------------------------------------------- output
std::string ms(double v) { return std::isnan(v) ? "-" : fmt::format("{:.3f}", v); }
std::string ratio(double a, double b) { return std::isnan(a) || std::isnan(b) ? "-" : fmt::format("{:.2f}", a / b); }

void print_rows(const std::vector<ConvRow>& rows, const CudaKernelOptions& o, bool nhwc) {
  fmt::print("device cuda:0  {}{}  {}  batch {}  (op: ringflow's conv2d; raw: cuDNN called here; torch: "
             "bench/torch_conv_layers.py)\n",
             dtype_name(o.dtype), o.dtype == DType::f32 ? (o.tf32 ? " with TF32" : ", no TF32") : "",
             nhwc ? "NHWC" : "NCHW", o.batch);
  fmt::print("{:<15} {:<40} {:>3} {:<16} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>8}\n", "model", "layer", "n", "pass",
             "op ms", "raw ms", "torch ms", "op/raw", "op/torch", "op TF/s", "check");
  for (const ConvRow& r : rows)
    fmt::print("{:<15} {:<40} {:>3} {:<16} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8.1f} {:>8.1e}{}\n", r.model,
               r.layer.name(), r.layer.count, pass_name(r.pass), ms(r.op_ms), ms(r.raw_ms), ms(r.torch_ms),
               ratio(r.op_ms, r.raw_ms), ratio(r.op_ms, r.torch_ms), r.layer.gflop() / r.op_ms, r.check,
               r.ok() ? "" : "  MISMATCH");
  // Per model and pass: the sum over its layers, each weighed by its count.
  fmt::print("\ntotals (every layer of the model, ms per call summed):\n");
  fmt::print("{:<15} {:<16} {:>9} {:>9} {:>9} {:>6} {:>8}\n", "model", "pass", "op ms", "raw ms", "torch ms",
             "op/raw", "op/torch");
  for (const std::string& model : o.models)
    for (Pass pass : kPasses) {
      const PassTotals t = pass_totals(rows, model, pass);
      fmt::print("{:<15} {:<16} {:>9} {:>9} {:>9} {:>6} {:>8}\n", model, pass_name(pass), ms(t.op_ms), ms(t.raw_ms),
                 ms(t.torch_ms), ratio(t.op_ms, t.raw_ms), ratio(t.op_ms, t.torch_ms));
    }
}

void print_json(const std::vector<ConvRow>& rows, const CudaKernelOptions& o, bool nhwc) {
  const auto num = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
  for (const ConvRow& r : rows)
    fmt::print("{}\n", nlohmann::json{{"model", r.model},
                                      {"layer", r.layer.name()},
                                      {"count", r.layer.count},
                                      {"pass", pass_name(r.pass)},
                                      {"dtype", dtype_name(o.dtype)},
                                      {"tf32", o.tf32},
                                      {"memory_format", nhwc ? "nhwc" : "nchw"},
                                      {"gflop", r.layer.gflop()},
                                      {"op_ms", r.op_ms},
                                      {"raw_cudnn_ms", r.raw_ms},
                                      {"torch_ms", num(r.torch_ms)},
                                      {"op_rel_rms_vs_raw", r.check}}
                           .dump());
}

// Raw cuBLAS sgemm 2048^3 (row-major C = A B as column-major C^T = B^T A^T) against matmul.
void sgemm_row(const CudaKernelOptions& o) {
  const Device d = Device::cuda();
  cublasHandle_t h;
  BENCH_CUBLAS(cublasCreate(&h));
  const int64_t n = 2048;
  Generator gen(2);
  const Tensor a = randn({n, n}, &gen).to(d), b = randn({n, n}, &gen).to(d), c_raw = empty({n, n}, DType::f32, d);
  BENCH_CUBLAS(cublasSetMathMode(h, o.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const float one = 1, zero = 0;
  const int k = static_cast<int>(n);
  const Call raw = [&] {
    BENCH_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, k, k, k, &one, static_cast<const float*>(ptr(b)), k,
                             static_cast<const float*>(ptr(a)), k, &zero, static_cast<float*>(ptr(c_raw)), k));
  };
  Tensor c_op;
  const Call op = [&] { c_op = {}, c_op = matmul(a, b); };
  raw();
  op();
  const double diff = rel_rms({{c_op, c_raw}});
  const auto [raw_ms, op_ms] = time_pair(raw, op, d, o);
  cublasDestroy(h);
  const double tflop = 2.0 * n * n * n / 1e12;
  fmt::print("sgemm 2048^3 f32{}: op (matmul) {:.3f} ms {:.1f} TFLOP/s, raw cuBLAS {:.3f} ms {:.1f} TFLOP/s, "
             "op/raw {:.2f}, check {:.1e}\n\n",
             o.tf32 ? " TF32" : "", op_ms, tflop / op_ms * 1e3, raw_ms, tflop / raw_ms * 1e3, op_ms / raw_ms, diff);
}

}  // namespace

int run_cuda_kernels(const CudaKernelOptions& o) {
  std::string why;
  if (cuda_device_count(&why) <= 0) {
    fmt::print("kernels --device cuda: no CUDA device ({}): nothing timed\n", why);
    return kNoDevice;
  }
  set_cuda_device(0);
  set_allow_tf32(o.tf32);
  set_memory_format(o.memory_format);
  const bool nhwc = conv_output_channels_last(o.memory_format, Device::cuda(), o.dtype, false, false, o.tf32);
  if (!o.json) sgemm_row(o);
  cudnnHandle_t h;
  BENCH_CUDNN(cudnnCreate(&h));
  std::vector<ConvRow> rows;
  for (const std::string& model : o.models) {
    std::vector<ConvRow> mine;
    for (const ConvLayer& l : distinct_layers(conv_layers(model, o.batch)))
      for (ConvRow& r : layer_rows(h, model, l, nhwc, o)) mine.push_back(std::move(r));
    if (!o.no_torch) add_torch(mine, model, nhwc, o);
    rows.insert(rows.end(), mine.begin(), mine.end());
  }
  cudnnDestroy(h);
  o.json ? print_json(rows, o, nhwc) : print_rows(rows, o, nhwc);
  // What ringflow's op ran for each shape: tensor-core engines or not, beside the other API's best.
  if (!o.json)
    for (const std::string& line : cudnn_conv_choices()) fmt::print("cudnn conv {}\n", line);
  return std::all_of(rows.begin(), rows.end(), [](const ConvRow& r) { return r.ok(); }) ? 0 : 1;
}

}  // namespace ringflow::bench

#pragma GCC diagnostic pop
