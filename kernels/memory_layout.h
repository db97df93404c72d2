// How a tensor's elements lie in memory beyond what strides say: oneDNN's blocked layouts of
// 4-D activations (N, C, H, W), which keep C in blocks of 8 or 16 innermost (nChw8c,
// nChw16c; element (n, c, h, w) at ((n * C/b + c/b) * H * W + h * W + w) * b + c % b). The CPU
// convolutions compute in them, and activations kept so between oneDNN primitives need no
// reorders (docs/kernels.md). A strided tensor is everything else: its strides describe it.
#pragma once

#include <cstdint>

namespace ringflow {

enum class MemoryLayout : uint8_t { strided, nChw8c, nChw16c };

// Channels per block: 8 or 16; 1 for strided.
inline int64_t channel_block(MemoryLayout layout) {
  switch (layout) {
    case MemoryLayout::nChw8c: return 8;
    case MemoryLayout::nChw16c: return 16;
    case MemoryLayout::strided: break;
  }
  return 1;
}

inline const char* memory_layout_name(MemoryLayout layout) {
  switch (layout) {
    case MemoryLayout::nChw8c: return "nChw8c";
    case MemoryLayout::nChw16c: return "nChw16c";
    case MemoryLayout::strided: break;
  }
  return "strided";
}

}  // namespace ringflow
