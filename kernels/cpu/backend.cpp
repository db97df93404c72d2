// The CPU backend table: reference_backend() with the fast kernels of kernels/cpu/ on top.
// Each fast kernel falls back to the reference entry for operands it does not take.
#include "ringflow/kernels/backend.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "ringflow/kernels/build_info.h"
#include "ringflow/kernels/cpu/allocator.h"
#include "ringflow/kernels/cpu/cpu_kernels.h"
#include "ringflow/kernels/cpu/loop_isa.h"

namespace ringflow {

// oneDNN held below its bf16 ISA (ONEDNN_MAX_CPU_ISA) has no bf16 kernels either.
bool cpu_native_bf16() {
  static const bool native =
      __builtin_cpu_supports("avx512bf16") && cpu::onednn_isa_has(dnnl::cpu_isa::avx512_core_bf16);
  return native;
}

cpu::LoopIsa cpu::loop_isa() {
  static const LoopIsa isa = [] {
    const CpuIsa& cpu = cpu_isa();
    const bool avx2 = cpu.avx2 && __builtin_cpu_supports("f16c");
    const LoopIsa best = avx2 && cpu.avx512 ? LoopIsa::avx512 : avx2 ? LoopIsa::avx2 : LoopIsa::baseline;
    // A narrower build may be asked for (the tests run each), never a wider one than the CPU has.
    const char* asked = std::getenv("RINGFLOW_CPU_LOOP_ISA");
    if (!asked) return best;
    const std::string name = asked;
    const LoopIsa want = name == "baseline" ? LoopIsa::baseline
                         : name == "avx2"   ? LoopIsa::avx2
                         : name == "avx512" ? LoopIsa::avx512
                                            : throw std::invalid_argument("RINGFLOW_CPU_LOOP_ISA='" + name +
                                                                          "' is none of baseline, avx2, avx512");
    return std::min(want, best);
  }();
  return isa;
}

const Backend& cpu_backend() {
  static const Backend table = [] {
    (void)cpu::loop_isa();  // a bad RINGFLOW_CPU_LOOP_ISA throws here, not inside a parallel loop
    Backend b = reference_backend();
    b.name = "cpu";
    b.prefers_channels_last = true;
    b.blocked_layout = cpu::conv_blocked_layout;
    b.allocate = cpu_allocate;
    b.deallocate = cpu_deallocate;
    b.copy = cpu::copy;
    b.fill = cpu::fill;
    b.unary = cpu::unary;
    b.binary = cpu::binary;
    b.where = cpu::where;
    b.reduce = cpu::reduce;
    b.matmul = cpu::matmul;
    b.conv2d_forward = cpu::conv2d_forward;
    b.conv2d_backward_data = cpu::conv2d_backward_data;
    b.conv2d_backward_weights = cpu::conv2d_backward_weights;
    b.max_pool2d_forward = cpu::max_pool2d_forward;
    b.max_pool2d_backward = cpu::max_pool2d_backward;
    b.avg_pool2d_forward = cpu::avg_pool2d_forward;
    b.avg_pool2d_backward = cpu::avg_pool2d_backward;
    b.adaptive_avg_pool2d_forward = cpu::adaptive_avg_pool2d_forward;
    b.adaptive_avg_pool2d_backward = cpu::adaptive_avg_pool2d_backward;
    b.batch_norm_forward_train = cpu::batch_norm_forward_train;
    b.batch_norm_forward_eval = cpu::batch_norm_forward_eval;
    b.batch_norm_backward = cpu::batch_norm_backward;
    b.batch_norm_relu_forward_train = cpu::batch_norm_relu_forward_train;
    b.batch_norm_relu_backward = cpu::batch_norm_relu_backward;
    b.softmax_forward = cpu::softmax_forward;
    b.softmax_backward = cpu::softmax_backward;
    b.sgd_step = cpu::sgd_step;
    b.adam_step = cpu::adam_step;
    b.matmul_bias = nullptr;  // composed: oneDNN's matmul, then add and relu
    b.unscale_grads = nullptr;  // the reference's is element by element in double: composed instead
    b.check_scaled_grads = nullptr;  // so the grad scaler unscales first, and no step takes a LossScale
    return b;
  }();
  return table;
}

}  // namespace ringflow
