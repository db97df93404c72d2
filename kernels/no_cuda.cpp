// Stand-ins for kernels/cuda/ in builds without CUDA (-Dcuda=disabled or nvcc not found):
// no CUDA table, no devices (with the reason); cross-device copies, pinned memory and
// cuda_record_stream (and the 1x1 GEMM of cuda_conv_test) throw; the CUDA allocator's
// statistics are zero; no CUDA library versions.
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/build_info.h"
#include "ringflow/kernels/cuda_copy.h"
#include "ringflow/kernels/cuda_devices.h"
#include "ringflow/kernels/cuda_graph.h"
#include "ringflow/kernels/cuda_memory.h"
#include "ringflow/kernels/cudnn_choices.h"
#include "ringflow/kernels/cuda/conv1x1_gemm.h"

namespace ringflow {
namespace {
constexpr const char* kWhy = "ringflow was built without CUDA (-Dcuda=disabled or nvcc not found)";
}

const Backend* cuda_backend() { return nullptr; }

std::vector<LibraryVersion> cuda_library_versions() { return {}; }

std::vector<std::string> cudnn_conv_choices() { return {}; }
std::vector<std::string> cudnn_batch_norm_choices() { return {}; }

int cuda_device_count(std::string* why) {
  if (why) *why = kWhy;
  return 0;
}

void copy_between_devices(const View& dst, Device dst_device, const View& src,
                          Device src_device) {
  if (dst_device.is_cpu() && src_device.is_cpu()) return cpu_backend().copy(dst, src);
  throw std::runtime_error("copy " + src_device.str() + " -> " + dst_device.str() + ": " + kWhy);
}

void set_cuda_device(int index) {
  throw std::runtime_error("set_cuda_device(" + std::to_string(index) + "): " + kWhy);
}

void DeviceScope::enter(int index) { set_cuda_device(index); }
void synchronize(Device device) {
  if (device.is_cuda()) throw std::runtime_error("synchronize(" + device.str() + "): " + kWhy);
}
void DeviceScope::leave() noexcept {}

void* allocate_pinned_host(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  throw std::runtime_error(std::string("pinned host memory: ") + kWhy);
}

void free_pinned_host(void* /*ptr*/) noexcept {}

StreamEvent::~StreamEvent() = default;
void StreamEvent::record(Device device) {
  throw std::runtime_error("recording an event on " + device.str() + ": " + kWhy);
}
void copy_after(const View& dst, Device dst_device, const View& src, Device src_device,
                const StreamEvent& /*after*/) {
  copy_between_devices(dst, dst_device, src, src_device);
}

PinnedStaging::~PinnedStaging() = default;
void PinnedStaging::wait() const {}
void* PinnedStaging::host(size_t /*nbytes*/) {
  throw std::runtime_error(std::string("pinned host memory: ") + kWhy);
}
void PinnedStaging::upload(void* /*device_dst*/, size_t /*nbytes*/, Device device) {
  throw std::runtime_error("upload to " + device.str() + ": " + kWhy);
}  // allocate_pinned_host never returned any

CachingAllocatorStats cuda_memory_stats(int device) {
  if (device < 0)
    throw std::invalid_argument("CUDA device index " + std::to_string(device) + " is negative");
  return {};
}

void cuda_reset_peak_memory_stats(int /*device*/) {}

void cuda_empty_cache() {}

void cuda_record_stream(void* /*ptr*/, CudaStream /*stream*/) {
  throw std::runtime_error(std::string("cuda_record_stream: ") + kWhy);
}

}  // namespace ringflow

namespace ringflow {

struct CudaGraph::Impl {};
CudaGraph::CudaGraph(int device) {
  throw std::runtime_error("CUDA graph on cuda:" + std::to_string(device) + ": " + kWhy);
}
CudaGraph::~CudaGraph() = default;
void CudaGraph::capture_begin() {}
void CudaGraph::capture_end() {}
void CudaGraph::replay() {}
bool CudaGraph::captured() const { return false; }

}  // namespace ringflow

namespace ringflow::cuda {

void conv1x1_gemm(ConvDirection, const View&, const View&, const View&, const Conv2dParams&, bool, bool) {
  throw std::runtime_error(std::string("cuda conv1x1_gemm: ") + kWhy);
}

}  // namespace ringflow::cuda
