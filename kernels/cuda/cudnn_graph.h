// cuDNN's graph (backend) API for one convolution, the way PyTorch's cudnn.benchmark uses it:
// the operation graph of a ConvGraphSpec (cudnn_conv_plan.h), the engine configurations
// cuDNN's heuristics propose for it with their notes, execution plans, and a call. Building
// and finalizing the operation graph needs no GPU (cuDNN checks shapes, strides and types on
// the host: tests/cudnn_graph_test.cpp); heuristics, plans and calls need the device.
//
// Note [cuDNN's two convolution APIs]: the legacy API (cudnnFind*AlgorithmEx) measures a
// fixed list of about eight algorithms, each with cuDNN's default tuning, and documents its
// tensor-core path for FP16 (with NCHW<->NHWC transformations) only; the graph API lists
// engine configurations (an engine with its knobs: tile sizes, split-K, layout handling),
// among them the sm90 kernels PyTorch's bf16 steps run. cudnn_conv.cpp times the candidates
// of both for each shape and keeps the fastest that qualifies (choose_algorithm).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "ringflow/kernels/cuda/cudnn_conv_plan.h"

namespace ringflow::cuda {

// An owned cudnnBackendDescriptor_t. set() and finalize() throw std::runtime_error naming
// the attribute or descriptor and cuDNN's own message.
class BackendDescriptor {
 public:
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept : d_(other.d_) { other.d_ = nullptr; }
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
           const void* values, const char* what);
  void finalize(const char* what);

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The finalized operation graph of one convolution, with the descriptors it refers to.
struct ConvOperationGraph {
  std::vector<BackendDescriptor> parts;  // x, w, y, the convolution, the operation
  BackendDescriptor graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
};

// The graph of `spec` (compute type f32, f64 for f64 data; alpha 1, beta 0). handle may be
// null: cuDNN then checks the graph without a device. Throws std::runtime_error with
// cuDNN's reason where it refuses a descriptor.
std::shared_ptr<ConvOperationGraph> build_conv_graph(const ConvGraphSpec& spec, cudnnHandle_t handle);

// An engine configuration proposed for a graph, with its engine's notes.
struct ConvEngineConfig {
  std::shared_ptr<BackendDescriptor> config;
  EngineNotes notes;
  int64_t engine = -1;  // the engine's global index
};

// Up to max_count configurations of `mode` (CUDNN_HEUR_MODE_INSTANT, ..._FALLBACK), in
// cuDNN's order (its guess of the fastest first). Needs the device.
std::vector<ConvEngineConfig> heuristic_configs(const ConvOperationGraph& graph,
                                                cudnnBackendHeurMode_t mode, int max_count);

// A finalized execution plan and what it refers to.
struct ConvPlan {
  std::shared_ptr<ConvOperationGraph> graph;
  ConvEngineConfig config;
  BackendDescriptor plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace = 0;  // bytes
};

// The plan of one configuration, or null where cuDNN does not support it for this graph.
std::shared_ptr<ConvPlan> make_plan(const std::shared_ptr<ConvOperationGraph>& graph,
                                    const ConvEngineConfig& config, cudnnHandle_t handle);

// Runs the plan on the handle's stream: x, w, y as in the ConvGraphSpec (dx / dw / dy for
// the backward passes); workspace holds plan.workspace bytes.
void execute(cudnnHandle_t handle, const ConvPlan& plan, void* x, void* w, void* y, void* workspace);

}  // namespace ringflow::cuda
