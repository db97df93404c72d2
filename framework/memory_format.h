// The layout of 4-D activations between layers, for the process (PyTorch's memory_format;
// train --memory-format, bench/train_step --memory-format). Convolutions lay out their
// outputs by it, and the ops after them (batch norm, relu, pooling, add) keep their input's
// layout, so that a conv-bn-relu-pool chain stays in one layout and makes no reorders. auto
// keeps f32 activations on the CPU in oneDNN's blocked layout (Note [blocked tensors]).
// Parameters, their gradients and checkpoints stay in PyTorch's layout (contiguous) whatever
// it is; the 16-bit casts of weights that autocast makes for channels-last convolutions are
// laid out channels-last (framework/autocast.h).
#pragma once

#include <string>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/device.h"
#include "ringflow/kernels/dtype.h"

namespace ringflow {

enum class MemoryFormat { automatic, nchw, nhwc };
inline constexpr MemoryFormat kMemoryFormats[] = {MemoryFormat::automatic, MemoryFormat::nchw, MemoryFormat::nhwc};

void set_memory_format(MemoryFormat format);
MemoryFormat memory_format();
const char* memory_format_name(MemoryFormat format);  // "auto", "nchw", "nhwc"
std::vector<std::string> memory_format_names();
// Throws std::invalid_argument listing the names.
MemoryFormat memory_format_from_name(const std::string& name);

// Whether a convolution's output, and so the activations after it, is channels-last (NHWC):
// nchw: never; nhwc: always; automatic: where its input is, where the device's kernels prefer
// it (`prefers_channels_last`: oneDNN's on the CPU), and on CUDA for 16-bit dtypes and for f32
// where `tf32` allows tensor cores, whose kernels run NHWC (NCHW operands cost a transformation
// on every call) while f32's FMA kernels are fastest NCHW (Note [16-bit activations
// channels-last on CUDA]).
bool conv_output_channels_last(MemoryFormat format, Device device, DType dtype, bool input_channels_last,
                               bool prefers_channels_last, bool tf32);

// The blocked layout (kernels/memory_layout.h) a convolution's `channels`-channel output of `dtype`
// takes, and so the activations after it (Note [blocked tensors] in tensor.h): automatic: the
// one `table`'s convolutions compute in (Backend::blocked_layout: oneDNN's nChw16c or nChw8c
// for f32 on the CPU), where it has one; strided (none) under nchw and nhwc, and otherwise.
MemoryLayout conv_output_blocked_layout(MemoryFormat format, const Backend& table, DType dtype, int64_t channels);

// Sets the format for a scope and restores the one before at its end.
class MemoryFormatGuard {
 public:
  explicit MemoryFormatGuard(MemoryFormat format) : saved_(memory_format()) { set_memory_format(format); }
  ~MemoryFormatGuard() { set_memory_format(saved_); }
  MemoryFormatGuard(const MemoryFormatGuard&) = delete;
  MemoryFormatGuard& operator=(const MemoryFormatGuard&) = delete;

 private:
  MemoryFormat saved_;
};

}  // namespace ringflow
