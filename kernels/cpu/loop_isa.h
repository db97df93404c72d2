// The CPU's own elementwise loops compiled for AVX2 and AVX-512 beside the build's baseline
// (x86-64 with SSE2 only: the binary runs on any x86-64), chosen once at run time. At the
// baseline a bf16 or f16 loop converts element by element, and took longer than the f32 loop
// on twice the bytes (docs/kernels.md).
#pragma once

namespace ringflow::cpu {

enum class LoopIsa { baseline, avx2, avx512 };  // narrowest first
// The widest this CPU runs (AVX2 with FMA and F16C; AVX-512 F, BW, DQ, VL), or a narrower one
// that RINGFLOW_CPU_LOOP_ISA (baseline, avx2, avx512) asks for.
LoopIsa loop_isa();

#define RF_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define RF_TARGET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))

// Calls f() from a function built for the ISA. f's body (a lambda with the loop, and the inline
// functions it calls) is inlined there, so it is compiled for that ISA: GCC inlines a function
// into a caller whose ISA is a superset of its own.
template <class F>
RF_TARGET_AVX512 __attribute__((flatten)) void on_avx512(const F& f) {
  f();
}
template <class F>
RF_TARGET_AVX2 __attribute__((flatten)) void on_avx2(const F& f) {
  f();
}
template <class F>
void with_loop_isa(const F& f) {
  switch (loop_isa()) {
    case LoopIsa::avx512: return on_avx512(f);
    case LoopIsa::avx2: return on_avx2(f);
    case LoopIsa::baseline: return f();
  }
}

// f(), built for the CPU's widest ISA where T is 16-bit: the conversions to and from f32 are
// most of such a loop's work, and the baseline build does them element by element. f32 loops
// stay at the baseline, which ran them faster than the wider builds (docs/kernels.md).
template <class T, class F>
void sized_loop(const F& f) {
  if constexpr (sizeof(T) == 2) with_loop_isa(f);
  else f();
}

}  // namespace ringflow::cpu
