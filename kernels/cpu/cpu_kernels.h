// The CPU backend's kernels, wired into the table by kernels/cpu/backend.cpp. Each one
// takes the fast path (oneDNN or an own OpenMP loop) when the operands allow it and
// otherwise calls the same entry of reference_backend().
#pragma once

#include <string>
#include <unordered_map>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cpu/dnnl_context.h"

namespace ringflow::cpu {

// Elementwise and reductions (elementwise.cpp, reduce.cpp).
void copy(const View& dst, const View& src);
void fill(const View& dst, double value);
void unary(UnaryOp op, const View& out, const View& in);
void binary(BinaryOp op, const View& out, const View& a, const View& b);
void where(const View& out, const View& cond, const View& a, const View& b);
void reduce(ReduceOp op, const View& out, const View& in);

// oneDNN (matmul.cpp, conv.cpp, pool.cpp, batch_norm.cpp, softmax.cpp).
void matmul(const View& out, const View& a, const View& b);
// The table's blocked_layout: what the convolutions compute f32 activations in.
MemoryLayout conv_blocked_layout(DType dtype, int64_t channels);
void conv2d_forward(const View& y, const View& x, const View& w, const View* bias,
                    const Conv2dParams& p);
void conv2d_backward_data(const View& dx, const View& dy, const View& w, const Conv2dParams& p);
void conv2d_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                             const Conv2dParams& p);
// im2col + GEMM for channels-last f32 and bf16 layers with small outputs (conv_gemm.cpp);
// false when the operands are not of that kind.
bool conv_gemm_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                                const Conv2dParams& p);
// db[k] = sum of channels-last bf16 dy (rows x K) over its rows (conv_gemm.cpp).
void conv_bias_grad(const View& db, const uint16_t* dy, int64_t rows, int64_t K);
// bf16 3x3 stride-1 convolutions by Winograd F(2x2, 3x3) where the CPU has AVX512-BF16 and
// no AMX (winograd.cpp); false when the operands are not of that kind.
bool winograd_runs_here();
bool winograd_forward(const View& y, const View& x, const View& w, const View* bias,
                      const Conv2dParams& p);
bool winograd_backward_data(const View& dx, const View& dy, const View& w, const Conv2dParams& p);
bool winograd_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                               const Conv2dParams& p);
// f32 3x3 stride-1 convolutions by Winograd F(2x2, 3x3) where the CPU has AVX2 and oneDNN
// runs below AVX-512, so has no Winograd of its own (winograd_f32.cpp); false when the
// operands are not of that kind.
bool winograd_f32_runs_here();
bool winograd_f32_forward(const View& y, const View& x, const View& w, const View* bias,
                          const Conv2dParams& p);
bool winograd_f32_backward_data(const View& dx, const View& dy, const View& w,
                                const Conv2dParams& p);
bool winograd_f32_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                                   const Conv2dParams& p);
Workspace max_pool2d_forward(const View& y, const View& x, const Pool2dParams& p);
void max_pool2d_backward(const View& dx, const View& dy, const View& x, const Workspace& ws,
                         const Pool2dParams& p);
void avg_pool2d_forward(const View& y, const View& x, const Pool2dParams& p);
void avg_pool2d_backward(const View& dx, const View& dy, const Pool2dParams& p);
void adaptive_avg_pool2d_forward(const View& y, const View& x);
void adaptive_avg_pool2d_backward(const View& dx, const View& dy);
void batch_norm_forward_train(const View& y, const View& mean, const View& var, const View& x,
                              const View* gamma, const View* beta, double eps);
void batch_norm_forward_eval(const View& y, const View& x, const View& mean, const View& var,
                             const View* gamma, const View* beta, double eps);
void batch_norm_backward(const View& dx, const View* dgamma, const View* dbeta, const View& dy,
                         const View& x, const View& mean, const View& var, const View* gamma,
                         double eps);
// Batch norm fused with relu(y + residual), as the backend table has them: own two-pass loops
// for 16-bit channels-last (or (N, C)) activations, else the separate kernels
// (batch_norm_relu.cpp).
void batch_norm_relu_forward_train(const View& y, const View& mean, const View& var, const View& x,
                                   const View* gamma, const View* beta, const View* residual, double eps);
void batch_norm_relu_backward(const View& dx, const View* dresidual, const View* dgamma, const View* dbeta,
                              const View& dy, const View& y, const View& x, const View& mean, const View& var,
                              const View* gamma, double eps);
void softmax_forward(const View& y, const View& x, int64_t dim, bool log);
void softmax_backward(const View& dx, const View& dy, const View& y, int64_t dim, bool log);

// optim.cpp
void sgd_step(DType dtype, const std::vector<OptimizerSlot>& slots, const SgdStep& h);
void adam_step(DType dtype, const std::vector<OptimizerSlot>& slots, const AdamStep& h);

// Looks up (or builds) a primitive. make() returns an empty CachedPrimitive, or throws
// dnnl::error with status unimplemented, when oneDNN has no implementation: that is
// remembered and lookup returns nullptr (the caller falls back to the reference kernel).
// Other oneDNN errors become std::runtime_error with context() (called only on error).
template <class Ctx, class Make>
const CachedPrimitive* lookup(const std::string& key, Ctx&& context, Make&& make) {
  const CachedPrimitive* p = nullptr;
  RF_CHECK_DNNL(p = &cached_primitive(key,
                                      [&]() -> CachedPrimitive {
                                        try {
                                          return make();
                                        } catch (const dnnl::error& e) {
                                          if (e.status == dnnl_unimplemented) return {};
                                          throw;
                                        }
                                      }),
                context());
  return p->prim ? p : nullptr;
}

// Executes a primitive; context() names the op on error.
template <class Ctx>
void execute(const CachedPrimitive& p, const std::unordered_map<int, dnnl::memory>& args,
             Ctx&& context) {
  RF_CHECK_DNNL(p.prim.execute(dnnl_stream(), args), context());
}

// True when v's elements fill numel() consecutive slots in some order (no gaps, no
// overlap, no broadcast): dense in any dim order.
bool is_dense(const View& v);

// True when every element of v is finite (no NaN, no inf); false too where v's dtype or
// layout is not one the own loops read (finite.cpp). The oneDNN kernels whose maximum drops
// a NaN (pooling, softmax) leave the other inputs to the reference kernels.
bool all_finite(const View& v);

// True when no dim is 0-sized in any of the Views, none has a zero stride on a dim of
// size > 1, and all have a dtype oneDNN takes.
bool dnnl_friendly(std::initializer_list<const View*> views);

}  // namespace ringflow::cpu
