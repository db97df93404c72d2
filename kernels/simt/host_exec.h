// HostExec runs SIMT kernel bodies (simt.h) on the CPU over the launch grid DeviceExec would
// use on the GPU (kernels/cuda/device_exec.cuh): every block, every thread, each thread's
// grid-stride share, one thread at a time. Block reductions combine the threads' partial
// results in the device's tree order, so results match the GPU's up to its math functions
// and nvcc's contraction of a * b + c into one FMA (a few ulps). Out-of-range float to int
// conversions and INT64_MIN / -1 are undefined on the host and do differ.
// For tests and the emulated CUDA table (host_backend.h), not for speed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <new>

#include "ringflow/kernels/simt/simt.h"
#include "ringflow/kernels/view.h"

namespace ringflow::simt {

// A block of kBlock threads working on one row together.
struct HostBlock {
  // Each thread folds elements thread, thread + kBlock, ... of [0, len) into its partial
  // with `combine`, then the partials are combined pairwise, halving (the device's tree).
  template <class T, class Load, class Combine>
  T reduce(int64_t len, T init, const Load& load, const Combine& combine) const {
    std::array<T, kBlock> partial;
    for (int t = 0; t < kBlock; ++t) {
      T acc = init;
      for (int64_t i = t; i < len; i += kBlock) acc = combine(acc, load(i));
      partial[t] = acc;
    }
    for (int width = kBlock / 2; width > 0; width /= 2)
      for (int t = 0; t < width; ++t) partial[t] = combine(partial[t], partial[t + width]);
    return partial[0];
  }
  // fn(i) for i in [0, len), split among the threads as reduce splits.
  template <class Fn>
  void for_each(int64_t len, const Fn& fn) const {
    for (int t = 0; t < kBlock; ++t)
      for (int64_t i = t; i < len; i += kBlock) fn(i);
  }
};

struct HostExec {
  // Memory of `bytes` that a later kernel of this table reads (e.g. max pooling's argmax).
  static Workspace workspace(size_t bytes) {
    return std::shared_ptr<void>(::operator new(bytes), [](void* p) { ::operator delete(p); });
  }
  // f(i) for i in [0, n): blocks_for(n) blocks of kBlock threads, grid-stride.
  template <class F>
  void elementwise(int64_t n, const F& f) const {
    if (n <= 0) return;
    const int64_t blocks = blocks_for(n), step = blocks * kBlock;
    for (int64_t b = 0; b < blocks; ++b)
      for (int t = 0; t < kBlock; ++t)
        for (int64_t i = b * kBlock + t; i < n; i += step) f(i);
  }
  // f(block, row) for row in [0, rows): one block per row, blocks_for_rows(rows) blocks.
  template <class F>
  void rows(int64_t rows, const F& f) const {
    if (rows <= 0) return;
    const int64_t blocks = blocks_for_rows(rows);
    const HostBlock block;
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t r = b; r < rows; r += blocks) f(block, r);
  }
};

}  // namespace ringflow::simt
