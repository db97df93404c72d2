#include "ringflow/framework/memory_format.h"

#include <atomic>
#include <stdexcept>

namespace ringflow {
namespace {

std::atomic<MemoryFormat> g_format{MemoryFormat::automatic};

constexpr std::pair<MemoryFormat, const char*> kNames[] = {
    {MemoryFormat::automatic, "auto"}, {MemoryFormat::nchw, "nchw"}, {MemoryFormat::nhwc, "nhwc"}};

}  // namespace

void set_memory_format(MemoryFormat format) { g_format.store(format); }
MemoryFormat memory_format() { return g_format.load(); }

const char* memory_format_name(MemoryFormat format) {
  for (const auto& [f, name] : kNames)
    if (f == format) return name;
  throw std::invalid_argument("unknown memory format " + std::to_string(static_cast<int>(format)));
}

std::vector<std::string> memory_format_names() {
  std::vector<std::string> out;
  for (const auto& [f, name] : kNames) out.emplace_back(name);
  return out;
}

MemoryFormat memory_format_from_name(const std::string& name) {
  for (const auto& [f, n] : kNames)
    if (name == n) return f;
  throw std::invalid_argument("memory format '" + name + "' is none of auto, nchw, nhwc");
}

// Note [16-bit activations channels-last on CUDA]: cuDNN's tensor-core convolutions read and
// write NHWC; given NCHW operands they transform them on every call, forward and backward
// (PyTorch's bf16 VGG-11 step on an H200 spent 0.55 ms of 3.7 so, issue 34). Kept NHWC from
// the first convolution's output on, the activations are transformed once, on the input.
// f32 without TF32 runs on FMA kernels, which cuDNN has mostly for NCHW: that stays; f32 on
// TF32 tensor cores runs NHWC as 16-bit does.
bool conv_output_channels_last(MemoryFormat format, Device device, DType dtype, bool input_channels_last,
                               bool prefers_channels_last, bool tf32) {
  switch (format) {
    case MemoryFormat::nchw: return false;
    case MemoryFormat::nhwc: return true;
    case MemoryFormat::automatic:
      return input_channels_last || prefers_channels_last ||
             (device.is_cuda() && (dtype == DType::f16 || dtype == DType::bf16 || (dtype == DType::f32 && tf32)));
  }
  return false;
}

MemoryLayout conv_output_blocked_layout(MemoryFormat format, const Backend& table, DType dtype, int64_t channels) {
  if (format != MemoryFormat::automatic || !table.blocked_layout) return MemoryLayout::strided;
  return table.blocked_layout(dtype, channels);
}

}  // namespace ringflow
