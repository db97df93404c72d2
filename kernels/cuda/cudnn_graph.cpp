#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the graph's and plan's HANDLE attributes

#include "ringflow/kernels/cuda/cudnn_graph.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ringflow/kernels/cuda/cudnn_descriptors.h"

namespace ringflow::cuda {
namespace {

// cuDNN's own account of its last failure on this thread (its reason for a refusal).
std::string last_error() {
  char message[1024] = {};
  cudnnGetLastErrorString(message, sizeof message);
  return message[0] ? std::string(": ") + message : std::string();
}

[[noreturn]] void fail(const char* call, const char* what, cudnnStatus_t status) {
  throw std::runtime_error(std::string("cuDNN graph API: ") + call + " " + what + " failed: " +
                           cudnnGetErrorString(status) + last_error());
}

BackendDescriptor tensor(const GraphTensorSpec& t, DType dtype) {
  BackendDescriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = data_type(dtype);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dims.data(), "tensor dimensions");
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.strides.data(), "tensor strides");
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid, "tensor unique id");
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &t.alignment, "tensor alignment");
  d.finalize(t.uid == kUidX ? "tensor x" : t.uid == kUidW ? "tensor w" : "tensor y");
  return d;
}

BackendDescriptor convolution(const ConvGraphSpec& s) {
  BackendDescriptor d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = s.dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2;
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "compute type");
  d.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "mode");
  d.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, "spatial dims");
  d.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, s.pre_padding.data(), "pre paddings");
  d.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, s.post_padding.data(), "post paddings");
  d.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s.stride.data(), "filter strides");
  d.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, s.dilation.data(), "dilations");
  d.finalize("convolution");
  return d;
}

// The attribute names of one direction's operation: x, w, y (dx, dw, dy), desc, alpha, beta.
struct OperationAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OperationAttributes operation_attributes(ConvDirection d) {
  switch (d) {
    case ConvDirection::forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvDirection::backward_data:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvDirection::backward_filter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  throw std::invalid_argument("cuDNN graph API: unknown convolution direction");
}

// The engine's notes of one flavour (numerical or behaviour), as a list of enum values.
template <class Note>
std::vector<Note> notes_of(const BackendDescriptor& engine, cudnnBackendAttributeName_t name,
                           cudnnBackendAttributeType_t type, int max) {
  std::vector<Note> notes(static_cast<size_t>(max));
  int64_t count = 0;
  const cudnnStatus_t status = cudnnBackendGetAttribute(engine.get(), name, type, max, &count, notes.data());
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendGetAttribute", "engine notes", status);
  notes.resize(static_cast<size_t>(count));
  return notes;
}

ConvEngineConfig describe(std::shared_ptr<BackendDescriptor> config) {
  ConvEngineConfig out;
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t count = 0;
  cudnnStatus_t status = cudnnBackendGetAttribute(config->get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &raw);
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendGetAttribute", "engine of a configuration", status);
  status = cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                    &count, &out.engine);
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendGetAttribute", "engine global index", status);
  for (cudnnBackendNumericalNote_t n : notes_of<cudnnBackendNumericalNote_t>(
           engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT)) {
    out.notes.tensor_core |= n == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    out.notes.down_convert_inputs |= n == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
    out.notes.reduced_precision_reduction |= n == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
  }
  for (cudnnBackendBehaviorNote_t n : notes_of<cudnnBackendBehaviorNote_t>(
           engine, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT))
    out.notes.runtime_compilation |= n == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  out.config = std::move(config);
  return out;
}

}  // namespace

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  const cudnnStatus_t status = cudnnBackendCreateDescriptor(type, &d_);
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendCreateDescriptor", "", status);
}

BackendDescriptor::~BackendDescriptor() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = other.d_;
    other.d_ = nullptr;
  }
  return *this;
}

void BackendDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* values, const char* what) {
  const cudnnStatus_t status = cudnnBackendSetAttribute(d_, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendSetAttribute", what, status);
}

void BackendDescriptor::finalize(const char* what) {
  const cudnnStatus_t status = cudnnBackendFinalize(d_);
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendFinalize", what, status);
}

std::shared_ptr<ConvOperationGraph> build_conv_graph(const ConvGraphSpec& s, cudnnHandle_t handle) {
  auto g = std::make_shared<ConvOperationGraph>();
  g->parts.push_back(tensor(s.x, s.dtype));
  g->parts.push_back(tensor(s.w, s.dtype));
  g->parts.push_back(tensor(s.y, s.dtype));
  g->parts.push_back(convolution(s));
  const OperationAttributes a = operation_attributes(s.direction);
  BackendDescriptor op(a.type);
  cudnnBackendDescriptor_t x = g->parts[0].get(), w = g->parts[1].get(), y = g->parts[2].get();
  cudnnBackendDescriptor_t conv = g->parts[3].get();
  op.set(a.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "operation x");
  op.set(a.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, "operation w");
  op.set(a.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "operation y");
  op.set(a.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv, "operation convolution");
  if (s.dtype == DType::f64) {
    const double alpha = 1, beta = 0;
    op.set(a.alpha, CUDNN_TYPE_DOUBLE, 1, &alpha, "alpha");
    op.set(a.beta, CUDNN_TYPE_DOUBLE, 1, &beta, "beta");
  } else {
    const float alpha = 1, beta = 0;
    op.set(a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha, "alpha");
    op.set(a.beta, CUDNN_TYPE_FLOAT, 1, &beta, "beta");
  }
  op.finalize("convolution operation");
  cudnnBackendDescriptor_t raw_op = op.get();
  g->parts.push_back(std::move(op));
  g->graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_op, "graph operations");
  // The handle names the device the heuristics plan for. cuDNN 9.8 and later deprecate the
  // attribute (they take the current device), so a refusal of it is no error.
  if (handle) (void)cudnnBackendSetAttribute(g->graph.get(), CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  g->graph.finalize("operation graph");
  return g;
}

std::vector<ConvEngineConfig> heuristic_configs(const ConvOperationGraph& graph,
                                                cudnnBackendHeurMode_t mode, int max_count) {
  BackendDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  cudnnBackendDescriptor_t raw_graph = graph.graph.get();
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_graph,
           "heuristics graph");
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  heur.finalize("heuristics");
  int64_t available = 0;
  cudnnStatus_t status = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &available, nullptr);
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendGetAttribute", "heuristics result count", status);
  const int64_t n = std::min<int64_t>(available, max_count);
  std::vector<std::shared_ptr<BackendDescriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < n; ++i) {
    configs.push_back(std::make_shared<BackendDescriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t got = 0;
  status = cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    n, &got, raw.data());
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendGetAttribute", "heuristics results", status);
  std::vector<ConvEngineConfig> out;
  for (int64_t i = 0; i < std::min(got, n); ++i) {
    try {
      out.push_back(describe(configs[static_cast<size_t>(i)]));
    } catch (const std::runtime_error&) {
      // The list's head stays usable (ranks are places in it) where a later entry is not.
      if (out.empty()) throw;
      break;
    }
  }
  return out;
}

std::shared_ptr<ConvPlan> make_plan(const std::shared_ptr<ConvOperationGraph>& graph,
                                    const ConvEngineConfig& config, cudnnHandle_t handle) {
  auto p = std::make_shared<ConvPlan>();
  p->graph = graph;
  p->config = config;
  cudnnBackendDescriptor_t raw = config.config->get();
  p->plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw, "plan configuration");
  // As for the graph: deprecated since cuDNN 9.8, where the plan takes the graph's device.
  (void)cudnnBackendSetAttribute(p->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  // A configuration the heuristics list may still not support this graph: not an error.
  if (cudnnBackendFinalize(p->plan.get()) != CUDNN_STATUS_SUCCESS) return nullptr;
  int64_t count = 0;
  const cudnnStatus_t status = cudnnBackendGetAttribute(p->plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                        CUDNN_TYPE_INT64, 1, &count, &p->workspace);
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendGetAttribute", "plan workspace size", status);
  return p;
}

void execute(cudnnHandle_t handle, const ConvPlan& plan, void* x, void* w, void* y, void* workspace) {
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* pointers[3] = {x, w, y};
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, "variant pack ids");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers, "variant pack pointers");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "variant pack workspace");
  pack.finalize("variant pack");
  const cudnnStatus_t status = cudnnBackendExecute(handle, plan.plan.get(), pack.get());
  if (status != CUDNN_STATUS_SUCCESS) fail("cudnnBackendExecute", "convolution plan", status);
}

}  // namespace ringflow::cuda

#pragma GCC diagnostic pop
