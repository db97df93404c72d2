// Convolutions on cuDNN (forward, backward-data, backward-filter, bias) in f32, f64, f16
// and bf16, f32 accumulation for the 16-bit types. For each shape (with its layout, dtype and
// alignment) the candidates of cuDNN's graph API (engine configurations its heuristics list,
// timed here), of its legacy API (cudnnFind*AlgorithmEx; for f16 and bf16 only where none
// of the graph API's qualifies: Note [Searching the legacy API]) and, for a 1x1 convolution,
// cuBLAS's GEMM (Note [1x1 convolutions as GEMMs] in conv1x1_gemm.h) are measured once, as
// cudnn.benchmark does, and the fastest that qualifies is cached (Note [cuDNN's two
// convolution APIs] in cudnn_graph.h; Note [Which cuDNN kernels a convolution may take] in
// cudnn_conv_plan.h); workspaces come from the caching allocator. Views cuDNN cannot
// describe are copied dense first; asymmetric padding reaches cuDNN as explicit zeros (Note
// [Asymmetric padding on cuDNN]).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // the legacy conv API of cuDNN 9

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/kernels/cuda/check.h"
#include "ringflow/kernels/cuda/conv1x1_gemm.h"
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cuda/cudnn_conv_plan.h"
#include "ringflow/kernels/cuda/cudnn_descriptors.h"
#include "ringflow/kernels/cuda/cudnn_graph.h"
#include "ringflow/kernels/cuda/cudnn_handle.h"
#include "ringflow/kernels/cuda/event_timer.h"
#include "ringflow/kernels/cudnn_choices.h"
#include "ringflow/kernels/derived_cache.h"

namespace ringflow::cuda {
namespace {

// Graph API configurations timed per shape: the first that qualify of cuDNN's instant
// heuristics (its guess of the fastest first) and of its fallback list (engines the
// heuristics may skip), out of the first kScannedConfigs of each list.
constexpr int kInstantConfigs = 8, kFallbackConfigs = 3, kScannedConfigs = 64;

cudnnMathType_t math_type(DType dt, bool tf32) {
  if (dt == DType::f64) return CUDNN_DEFAULT_MATH;
  if (dt == DType::f32) return tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

// Whether a 4-D view is laid out (N, H, W, C) in memory rather than (N, C, H, W).
bool channels_last(const View& v) { return !v.is_contiguous() && v.is_channels_last(); }

// Whether cuDNN can take v as it is in a call that runs NHWC (nhwc) or NCHW.
bool in_layout(const View& v, bool nhwc) {
  return tensor_dims(v, nhwc) && (nhwc ? v.is_channels_last() : v.is_contiguous());
}

// A dense buffer (not filled) of v's shape, (N, C, H, W) in memory or channels last.
View dense_like(const View& v, std::optional<DeviceBuffer>& buffer, bool last) {
  return allocate_for(dense_layout(v, last), buffer);
}

// An activation operand of a call that runs NHWC (nhwc) or NCHW: v itself when cuDNN takes it
// so, else a dense buffer in that layout, filled from v when `fill` (an input).
View operand(const View& v, bool nhwc, bool fill, std::optional<DeviceBuffer>& buffer) {
  if (in_layout(v, nhwc)) return v;
  const View d = dense_like(v, buffer, nhwc);
  if (fill) copy(d, v);
  return d;
}

// x with the explicit zero rows and columns of `pad` around it, in `buffer` (x's layout): when
// `fill_from_x`, zeroed and x copied into its interior (else left for an output to write whole).
// Returns the padded view; *interior (if given) is the part that x covers.
View padded(const View& x, const ConvPadding& pad, bool fill_from_x, bool nhwc,
            std::optional<DeviceBuffer>& buffer, View* interior = nullptr) {
  View big = x;
  big.shape[2] += pad.extra_top + pad.extra_bottom;
  big.shape[3] += pad.extra_left + pad.extra_right;
  big = dense_like(big, buffer, nhwc);
  if (fill_from_x) fill(big, 0.0);
  View in = big;
  in.shape = x.shape;
  in.data = static_cast<char*>(big.data) +
            (pad.extra_top * big.strides[2] + pad.extra_left * big.strides[3]) * dtype_size(x.dtype);
  if (fill_from_x) copy(in, x);
  if (interior) *interior = in;
  return big;
}

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const View& w, bool nhwc) {
    RF_CHECK_CUDNN(cudnnCreateFilterDescriptor(&d));
    const auto layout = filter_layout(w, nhwc);
    RF_CHECK_CUDNN(cudnnSetFilter4dDescriptor(
        d, data_type(w.dtype), *layout == FilterLayout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
        static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1]), static_cast<int>(w.shape[2]),
        static_cast<int>(w.shape[3])));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const ConvPadding& pad, const Conv2dParams& p, DType dt, bool tf32) {
    RF_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d));
    RF_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(
        d, static_cast<int>(pad.pad_h), static_cast<int>(pad.pad_w), static_cast<int>(p.stride_h),
        static_cast<int>(p.stride_w), static_cast<int>(p.dilation_h), static_cast<int>(p.dilation_w),
        CUDNN_CROSS_CORRELATION, dt == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    RF_CHECK_CUDNN(cudnnSetConvolutionMathType(d, math_type(dt, tf32)));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// The descriptors of one legacy call on operands cuDNN can describe.
struct LegacyCall {
  TensorDesc xd, yd;
  FilterDesc wd;
  ConvDesc cd;
  LegacyCall(const View& x, const View& w, const View& y, const ConvPadding& pad, const Conv2dParams& p,
             bool tf32, bool nhwc)
      : xd(x, nhwc), yd(y, nhwc), wd(w, nhwc), cd(pad, p, x.dtype, tf32) {}
};

ConvKey conv_key(ConvDirection direction, const View& x, const View& w, const View& y,
                 const Conv2dParams& p, bool tf32, bool nhwc) {
  ConvKey key;
  RF_CHECK_CUDA(cudaGetDevice(&key.device));
  key.direction = direction;
  key.dtype = x.dtype;
  key.tf32 = tf32;
  key.x = *tensor_dims(x, nhwc);
  key.y = *tensor_dims(y, nhwc);
  key.w = {static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1]), static_cast<int>(w.shape[2]),
           static_cast<int>(w.shape[3])};
  key.w_layout = *filter_layout(w, nhwc);
  key.params = {p.pad_top, p.pad_bottom, p.pad_left, p.pad_right, p.stride_h, p.stride_w, p.dilation_h,
                p.dilation_w};
  key.align = {alignment(x.data), alignment(w.data), alignment(y.data)};
  return key;
}

// cuDNN ran none of its algorithms for a call (with FMA math alone it has none for some
// channels-last shapes): the caller may try again in NCHW.
struct NoAlgorithm : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a search found: candidates of both APIs and the GEMM; a graph candidate's index points
// into plans, a legacy one's into maths (the math type cuDNN measured it with).
struct Candidates {
  std::vector<ConvCandidate> list;
  std::vector<std::shared_ptr<ConvPlan>> plans;
  std::vector<cudnnMathType_t> maths;
  std::string graph_error;  // why the graph API gave no candidates, where it failed
};

struct Chosen {
  bool none = false;  // nothing qualified (cached, so that the search is not repeated)
  std::string why;    // then: the candidates
  ConvCandidate candidate;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // legacy: set on the descriptor before the call
  std::shared_ptr<ConvPlan> plan;             // graph
};

template <class Perf>
ConvCandidate legacy_candidate(const Perf& r) {
  ConvCandidate c;
  c.algo = static_cast<int>(r.algo);
  c.ok = r.status == CUDNN_STATUS_SUCCESS;
  c.math = r.mathType == CUDNN_FMA_MATH        ? ConvMath::fma
           : r.mathType == CUDNN_DEFAULT_MATH ? ConvMath::default_math
                                              : ConvMath::tensor_ops;
  c.time_ms = r.time;
  c.workspace = r.memory;
  return c;
}

template <class Perf>
void add_legacy(const Perf* results, int count, Candidates& out) {
  for (int i = 0; i < count; ++i) {
    ConvCandidate c = legacy_candidate(results[i]);
    c.index = static_cast<int>(out.maths.size());
    out.maths.push_back(results[i].mathType);
    out.list.push_back(c);
  }
}

// cudnnFind*AlgorithmEx of one direction on the call's operands (x, w, y: dx / dw / dy as
// the direction has them).
void legacy_find(ConvDirection d, cudnnHandle_t h, const LegacyCall& c, const View& x, const View& w,
                 const View& y, void* ws, size_t limit, Candidates& out) {
  int n = 0;
  switch (d) {
    case ConvDirection::forward: {
      cudnnConvolutionFwdAlgoPerf_t r[16];
      RF_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithmEx(h, c.xd.d, x.data, c.wd.d, w.data, c.cd.d, c.yd.d,
                                                            y.data, 16, &n, r, ws, limit));
      return add_legacy(r, n, out);
    }
    case ConvDirection::backward_data: {
      cudnnConvolutionBwdDataAlgoPerf_t r[16];
      RF_CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithmEx(h, c.wd.d, w.data, c.yd.d, y.data, c.cd.d,
                                                                 c.xd.d, x.data, 16, &n, r, ws, limit));
      return add_legacy(r, n, out);
    }
    case ConvDirection::backward_filter: {
      cudnnConvolutionBwdFilterAlgoPerf_t r[16];
      RF_CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, c.xd.d, x.data, c.yd.d, y.data, c.cd.d,
                                                                   c.wd.d, w.data, 16, &n, r, ws, limit));
      return add_legacy(r, n, out);
    }
  }
}

void legacy_run(ConvDirection d, cudnnHandle_t h, const LegacyCall& c, const Chosen& chosen, const View& x,
                const View& w, const View& y, void* ws) {
  const Scalars s(x.dtype);
  const size_t size = chosen.candidate.workspace;
  RF_CHECK_CUDNN(cudnnSetConvolutionMathType(c.cd.d, chosen.math));  // as measured
  switch (d) {
    case ConvDirection::forward:
      RF_CHECK_CUDNN(cudnnConvolutionForward(h, s.one(), c.xd.d, x.data, c.wd.d, w.data, c.cd.d,
                                             static_cast<cudnnConvolutionFwdAlgo_t>(chosen.candidate.algo),
                                             ws, size, s.zero(), c.yd.d, y.data));
      return;
    case ConvDirection::backward_data:
      RF_CHECK_CUDNN(cudnnConvolutionBackwardData(
          h, s.one(), c.wd.d, w.data, c.yd.d, y.data, c.cd.d,
          static_cast<cudnnConvolutionBwdDataAlgo_t>(chosen.candidate.algo), ws, size, s.zero(), c.xd.d, x.data));
      return;
    case ConvDirection::backward_filter:
      RF_CHECK_CUDNN(cudnnConvolutionBackwardFilter(
          h, s.one(), c.xd.d, x.data, c.yd.d, y.data, c.cd.d,
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(chosen.candidate.algo), ws, size, s.zero(), c.wd.d,
          w.data));
      return;
  }
}

// The plan's time on these operands, ms.
float time_plan(cudnnHandle_t h, const ConvPlan& plan, const View& x, const View& w, const View& y, void* ws) {
  return time_best_of_two([&] { execute(h, plan, x.data, w.data, y.data, ws); });
}

// The graph API's candidates: the first configurations of the instant heuristics and of the
// fallback list that could qualify (configs_to_time), each made a plan and timed. A graph
// cuDNN refuses gives none (the legacy API may still have some).
void graph_find(const ConvGraphSpec& spec, cudnnHandle_t h, const View& x, const View& w, const View& y,
                bool tf32, void* ws, size_t limit, Candidates& out) {
  std::shared_ptr<ConvOperationGraph> graph;
  // Each list's configurations to time, with their places in it and whether a fallback's.
  struct Picked {
    ConvEngineConfig config;
    size_t rank;
    bool fallback;
  };
  std::vector<Picked> picked;
  try {
    graph = build_conv_graph(spec, h);
    for (const bool fallback : {false, true}) {
      std::vector<ConvEngineConfig> list = heuristic_configs(
          *graph, fallback ? CUDNN_HEUR_MODE_FALLBACK : CUDNN_HEUR_MODE_INSTANT, kScannedConfigs);
      std::vector<EngineNotes> notes;
      for (const ConvEngineConfig& c : list) notes.push_back(c.notes);
      for (const size_t i : configs_to_time(notes, spec.dtype, tf32, fallback ? kFallbackConfigs : kInstantConfigs))
        picked.push_back({std::move(list[i]), i, fallback});
    }
  } catch (const std::runtime_error& e) {
    out.graph_error = e.what();
    return;
  }
  for (const Picked& p : picked) {
    const ConvEngineConfig& config = p.config;
    ConvCandidate c;
    c.source = ConvSource::graph;
    c.engine = config.engine;
    c.fallback = p.fallback;
    c.rank = static_cast<int>(p.rank);
    c.math = engine_math(config.notes);
    std::shared_ptr<ConvPlan> plan;
    try {
      plan = make_plan(graph, config, h);
    } catch (const std::runtime_error&) {
    }
    if (!plan) continue;
    c.workspace = static_cast<size_t>(plan->workspace);
    if (c.workspace <= limit) {
      try {
        c.time_ms = time_plan(h, *plan, x, w, y, ws);
        c.ok = true;
      } catch (const std::runtime_error&) {
      }
    }
    c.index = static_cast<int>(out.plans.size());
    out.plans.push_back(c.ok ? plan : nullptr);
    out.list.push_back(c);
  }
}

// The GEMM of a 1x1 convolution as one more candidate: cuBLAS's sgemm is FMA math unless
// TF32 is allowed (as run_conv read it), 16-bit GEMMs tensor cores. `scratch`: the bytes of
// its channels-last copies, if it makes them.
void gemm_find(const std::function<void()>& gemm, DType dtype, bool tf32, size_t scratch, Candidates& out) {
  ConvCandidate c;
  c.source = ConvSource::gemm;
  c.workspace = scratch;  // held to the workspace limit as cuDNN's are
  c.math = dtype == DType::f32 && !tf32 ? ConvMath::fma : ConvMath::tensor_ops;
  try {
    c.time_ms = time_best_of_two(gemm);
    c.ok = true;
  } catch (const std::runtime_error&) {
  }
  out.list.push_back(c);
}

// What was chosen for each key, and the lines cudnn_conv_choices() reports.
struct ChoiceCache {
  std::mutex mutex;
  std::map<ConvKey, Chosen> chosen;
  std::vector<std::string> lines;
};
ChoiceCache& choice_cache() {
  static auto* cache = new ChoiceCache;  // never destroyed, as the handles
  return *cache;
}

const char* direction_name(ConvDirection d) {
  return d == ConvDirection::forward ? "forward" : d == ConvDirection::backward_data ? "backward-data"
                                                                                      : "backward-filter";
}

// "forward bf16 x (256, 64, 32, 32) nhwc w (128, 64, 3, 3): graph engine 12 #1 tensor-ops ... (best
// legacy: algo 1 ...); 11 candidates in 85 ms"; `limit`: the workspace the search had, `ms` its time.
std::string choice_line(const ConvKey& key, const View& x, const View& w, const Chosen& c,
                        const Candidates& found, size_t limit, double ms) {
  const bool nhwc = key.w_layout == FilterLayout::nhwc;  // every operand is in the call's layout
  std::string line = std::string(direction_name(key.direction)) + " " + dtype_name(key.dtype) +
                     (key.tf32 && key.dtype == DType::f32 ? " tf32" : "") + " x " + shape_str(x.shape) +
                     (nhwc ? " nhwc" : " nchw") + " w " + shape_str(w.shape) + ": ";
  line += c.none ? "none" : describe_candidate(c.candidate);
  // The best of the other sources, where they had one, for comparison.
  for (const ConvSource other : {ConvSource::legacy, ConvSource::graph, ConvSource::gemm}) {
    if (c.none || other == c.candidate.source) continue;
    std::vector<ConvCandidate> theirs;
    for (const ConvCandidate& k : found.list)
      if (k.source == other) theirs.push_back(k);
    const auto best =
        choose_algorithm(theirs.data(), static_cast<int>(theirs.size()), key.dtype, key.tf32, limit);
    const char* name = other == ConvSource::graph ? "graph" : other == ConvSource::gemm ? "gemm" : "legacy";
    line += best ? " (best " + std::string(name) + ": " + describe_candidate(*best) + ")" : "";
  }
  line += "; " + std::to_string(found.list.size()) + " candidates in " + std::to_string(std::lround(ms)) + " ms";
  return found.graph_error.empty() ? line : line + "; graph API: " + found.graph_error;
}

// The cached choice for key; on a miss, `search` fills the candidates (given a workspace of
// `limit` bytes) and the fastest that qualifies is kept.
Chosen choose(const ConvKey& key, const View& x, const View& w,
              const std::function<void(void*, size_t, Candidates&)>& search) {
  ChoiceCache& cache = choice_cache();
  {
    std::lock_guard lock(cache.mutex);
    if (const auto it = cache.chosen.find(key); it != cache.chosen.end()) return it->second;
  }
  size_t free_bytes = 0, total = 0;
  RF_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total));
  const size_t wanted = cudnn_workspace_limit();
  const size_t limit = std::min(wanted, free_bytes / 2);
  Candidates found;
  double ms = 0;  // the search's, its workspace's allocation aside
  {
    DeviceBuffer workspace(limit);
    const auto start = std::chrono::steady_clock::now();
    search(workspace.data(), limit, found);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  Chosen chosen;
  const auto best = choose_algorithm(found.list.data(), static_cast<int>(found.list.size()), key.dtype,
                                     key.tf32, limit);
  if (best) {
    chosen.candidate = *best;
    if (best->source == ConvSource::graph) chosen.plan = found.plans[static_cast<size_t>(best->index)];
    else if (best->source == ConvSource::legacy) chosen.math = found.maths[static_cast<size_t>(best->index)];
  } else {
    chosen.none = true;
    chosen.why = describe_candidates(found.list.data(), static_cast<int>(found.list.size()));
  }
  std::lock_guard lock(cache.mutex);
  // A search with less than the whole workspace (memory was short) is not remembered when it
  // found nothing: a later call searches again.
  if (best || limit == wanted) {
    cache.chosen.emplace(key, chosen);
    cache.lines.push_back(choice_line(key, x, w, chosen, found, limit, ms));
  }
  return chosen;
}

// Runs one direction on operands in one layout that cuDNN describes (x, w, y: dx / dw / dy as
// the direction has them), padded alike on both sides: the candidates of both APIs (and the
// GEMM of a 1x1 convolution) compete.
// Throws NoAlgorithm when none qualified.
void run_conv(ConvDirection d, const View& x, const View& w, const View& y, const Conv2dParams& p, bool nhwc,
              const char* op) {
  const bool tf32 = allow_tf32();  // read once per call, first: the descriptors and the key agree
  const ConvPadding pad = conv_padding(p);
  assert(!pad.explicit_zeros());
  const ConvKey key = conv_key(d, x, w, y, p, tf32, nhwc);
  cudnnHandle_t h = cudnn_handle();
  std::optional<LegacyCall> call;  // made when the legacy API searches or runs
  const auto legacy_call = [&]() -> const LegacyCall& {
    if (!call) call.emplace(x, w, y, pad, p, tf32, nhwc);
    return *call;
  };
  const auto gemm = [&] { conv1x1_gemm(d, x, w, y, p, nhwc, tf32); };
  const Chosen c = choose(key, x, w, [&](void* ws, size_t limit, Candidates& found) {
    if (const auto spec = conv_graph_spec(d, x, w, y, p, nhwc)) graph_find(*spec, h, x, w, y, tf32, ws, limit, found);
    if (search_legacy(key.dtype, tf32, found.list.data(), static_cast<int>(found.list.size()), limit))
      legacy_find(d, h, legacy_call(), x, w, y, ws, limit, found);
    // f64 (gradient checks, not speed) stays on cuDNN.
    const Conv1x1Gemm route = x.dtype == DType::f64 ? Conv1x1Gemm::none : conv1x1_gemm_route(d, x, w, y, p, nhwc);
    if (route != Conv1x1Gemm::none)
      gemm_find(gemm, key.dtype, tf32,
                route == Conv1x1Gemm::via_channels_last ? static_cast<size_t>(x.numel() + y.numel()) * dtype_size(x.dtype)
                                                         : 0,
                found);
  });
  if (c.none)
    throw NoAlgorithm(std::string("cuda ") + op + ": cuDNN has no algorithm for x " + shape_str(x.shape) +
                      " w " + shape_str(w.shape) + " " + dtype_name(x.dtype) + " (candidates: " + c.why + ")");
  if (c.candidate.source == ConvSource::gemm) return gemm();  // its route follows from the key
  DeviceBuffer workspace(c.candidate.workspace);
  if (c.plan) execute(h, *c.plan, x.data, w.data, y.data, workspace.data());
  else legacy_run(d, h, legacy_call(), c, x, w, y, workspace.data());
}

// p with the padding cuDNN's legacy API gets once the explicit zeros carry the rest.
Conv2dParams symmetric(const Conv2dParams& p, const ConvPadding& pad) {
  Conv2dParams s = p;
  s.pad_top = s.pad_bottom = pad.pad_h;
  s.pad_left = s.pad_right = pad.pad_w;
  return s;
}

// run_conv for the directions that read x (forward, backward-filter), x first padded with the
// explicit zeros of an asymmetric padding.
void run_conv_reading_x(ConvDirection d, const View& x, const View& w, const View& y, const Conv2dParams& p,
                        bool nhwc, const char* op) {
  const ConvPadding pad = conv_padding(p);
  if (!pad.explicit_zeros()) return run_conv(d, x, w, y, p, nhwc, op);
  std::optional<DeviceBuffer> buffer;
  run_conv(d, padded(x, pad, /*fill_from_x=*/true, nhwc, buffer), w, y, symmetric(p, pad), nhwc, op);
}

// Checks shapes and dtypes as the reference does.
void check_conv(const View& x, const View& w, const View& y, const Conv2dParams& p, const char* op) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument(std::string("cuda ") + op + ": " + what);
  };
  if (x.dim() != 4 || w.dim() != 4 || y.dim() != 4)
    fail("x, w, y must be 4-D, got " + shape_str(x.shape) + ", " + shape_str(w.shape) + ", " + shape_str(y.shape));
  if (x.dtype != w.dtype || x.dtype != y.dtype)
    fail(std::string("dtypes differ: ") + dtype_name(x.dtype) + ", " + dtype_name(w.dtype) + ", " + dtype_name(y.dtype));
  (void)data_type(x.dtype);
  if (p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 || p.dilation_w < 1 ||
      p.pad_top < 0 || p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0)
    fail("stride and dilation must be positive and padding non-negative");
  const int64_t eh = (w.shape[2] - 1) * p.dilation_h + 1, ew = (w.shape[3] - 1) * p.dilation_w + 1;
  const int64_t P = (x.shape[2] + p.pad_top + p.pad_bottom - eh) / p.stride_h + 1;
  const int64_t Q = (x.shape[3] + p.pad_left + p.pad_right - ew) / p.stride_w + 1;
  if (w.shape[1] != x.shape[1] || y.shape[0] != x.shape[0] || y.shape[1] != w.shape[0] ||
      y.shape[2] != P || y.shape[3] != Q)
    fail("x " + shape_str(x.shape) + " and w " + shape_str(w.shape) + " give (" +
         std::to_string(x.shape[0]) + ", " + std::to_string(w.shape[0]) + ", " + std::to_string(P) +
         ", " + std::to_string(Q) + "), not y " + shape_str(y.shape));
}

// A reordered filter kept in its weight's DerivedCache: valid while the weight's version is.
struct ReorderedFilter {
  std::mutex mutex;
  std::optional<uint64_t> version;  // of the weight it was copied from; none: not filled
  std::optional<DeviceBuffer> buffer;
};

// Whether cuDNN can take the filter w as it is in a call that runs NHWC (nhwc) or NCHW.
bool filter_in_layout(const View& w, bool nhwc) {
  return filter_layout(w, nhwc) == (nhwc ? FilterLayout::nhwc : FilterLayout::nchw);
}

// The filter gradient dw as the call writes it: itself, or a buffer (not filled) in the layout.
View filter_output(const View& dw, bool nhwc, std::optional<DeviceBuffer>& buffer) {
  return filter_in_layout(dw, nhwc) ? dw : dense_like(dw, buffer, nhwc);
}

// The filter w in the call's layout, filled: cuDNN has few algorithms, if any, for a filter in
// another layout than the activations'. A weight read in another layout than its own is
// reordered once per version, not once per call: forward and backward-data of one step share
// the copy, kept in the weight storage's DerivedCache (View::derived).
View filter_operand(const View& w, bool nhwc, std::optional<DeviceBuffer>& buffer) {
  if (filter_in_layout(w, nhwc)) return w;
  if (!w.derived || !w.is_contiguous()) {
    const View d = dense_like(w, buffer, nhwc);
    copy(d, w);
    return d;
  }
  const std::string key = std::string("cudnn_filter_nhwc ") + shape_str(w.shape) + " " + dtype_name(w.dtype) +
                          " @" + std::to_string(reinterpret_cast<uintptr_t>(w.data));
  const auto entry = std::static_pointer_cast<ReorderedFilter>(
      w.derived->entry(key, [] { return std::make_shared<ReorderedFilter>(); }));
  std::lock_guard lock(entry->mutex);
  View d = dense_layout(w, nhwc);
  if (entry->buffer) {
    d.data = entry->buffer->data();
  } else {
    d = allocate_for(d, entry->buffer);
  }
  if (entry->version != w.version) {
    copy(d, w);
    entry->version = w.version;
  }
  return d;
}

void forward_in(const View& y, const View& x, const View& w, const View* bias, const Conv2dParams& p,
                bool nhwc) {
  const char* op = "conv2d_forward";
  std::optional<DeviceBuffer> xb, wb, yb;
  const View xv = operand(x, nhwc, /*fill=*/true, xb);
  const View wv = filter_operand(w, nhwc, wb);
  const View yv = operand(y, nhwc, /*fill=*/false, yb);
  run_conv_reading_x(ConvDirection::forward, xv, wv, yv, p, nhwc, op);
  if (bias) {
    if (bias->dtype != y.dtype || bias->dim() != 1 || bias->shape[0] != y.shape[1])
      throw std::invalid_argument("cuda conv2d_forward: bias " + shape_str(bias->shape) + " " +
                                  dtype_name(bias->dtype) + " for y " + shape_str(y.shape));
    const Scalars s(x.dtype);
    const TensorDesc bd(*bias, 0), yd(yv, nhwc);
    RF_CHECK_CUDNN(cudnnAddTensor(cudnn_handle(), s.one(), bd.d, bias->data, s.one(), yd.d, yv.data));
  }
  if (yv.data != y.data) copy(y, yv);
}

void backward_data_in(const View& dx, const View& dy, const View& w, const Conv2dParams& p, bool nhwc) {
  const char* op = "conv2d_backward_data";
  std::optional<DeviceBuffer> dxb, dyb, wb;
  const View dxv = operand(dx, nhwc, /*fill=*/false, dxb);
  const View dyv = operand(dy, nhwc, /*fill=*/true, dyb);
  const View wv = filter_operand(w, nhwc, wb);
  const ConvPadding pad = conv_padding(p);
  if (pad.explicit_zeros()) {
    // Into a buffer with the explicit zeros' rows and columns; its interior is dx.
    std::optional<DeviceBuffer> pb;
    View interior;
    const View big = padded(dxv, pad, /*fill_from_x=*/false, nhwc, pb, &interior);
    run_conv(ConvDirection::backward_data, big, wv, dyv, symmetric(p, pad), nhwc, op);
    copy(dxv, interior);
  } else {
    run_conv(ConvDirection::backward_data, dxv, wv, dyv, p, nhwc, op);
  }
  if (dxv.data != dx.data) copy(dx, dxv);
}

// The own sum over N, H, W into db (a (1, K, 1, 1) view of it).
void own_bias_sum(const View& db, const View& dy) {
  View out = db;
  const int64_t K = db.shape[0], s1 = db.strides[0];
  out.shape = {1, K, 1, 1};
  out.strides = {K * s1, s1, s1, s1};
  cuda_backend()->reduce(ReduceOp::sum, out, dy);
}

void backward_bias(const View& db, const View& dy, bool nhwc) {
  if (db.dtype != dy.dtype || db.dim() != 1 || db.shape[0] != dy.shape[1])
    throw std::invalid_argument("cuda conv2d_backward_weights: db " + shape_str(db.shape) + " " +
                                dtype_name(db.dtype) + " for dy " + shape_str(dy.shape));
  // Channels-last, cuDNN's sum took most of VGG-11's first backward-weights on an H100 (Note
  // [Column sums] in kernels/simt/reduce.h); the own one reads along the rows.
  if (nhwc) return own_bias_sum(db, dy);
  const Scalars s(dy.dtype);
  const TensorDesc bd(db, 0), yd(dy, nhwc);
  const cudnnStatus_t status = cudnnConvolutionBackwardBias(cudnn_handle(), s.one(), yd.d, dy.data, s.zero(),
                                                            bd.d, db.data);
  // cuDNN 9 refuses some shapes (a (1, 1, 1, 1) dy on an H100).
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return own_bias_sum(db, dy);
  RF_CHECK_CUDNN(status);
}

void backward_weights_in(const View& dw, const View* db, const View& dy, const View& x,
                         const Conv2dParams& p, bool nhwc) {
  const char* op = "conv2d_backward_weights";
  std::optional<DeviceBuffer> xb, dyb, dwb;
  const View xv = operand(x, nhwc, /*fill=*/true, xb);
  const View dyv = operand(dy, nhwc, /*fill=*/true, dyb);
  const View dwv = filter_output(dw, nhwc, dwb);
  run_conv_reading_x(ConvDirection::backward_filter, xv, dwv, dyv, p, nhwc, op);
  if (dwv.data != dw.data) copy(dw, dwv);
  if (db) backward_bias(*db, dyv, nhwc);
}

// Runs `conv(nhwc)`: channels-last where either activation is (the framework lays out
// 16-bit activations so on CUDA: framework/memory_format.h), the other converted; where cuDNN
// has no algorithm channels-last (with FMA math alone it has none for some shapes), again in
// NCHW.
template <class Conv>
void in_either_layout(const View& a, const View& b, Conv&& conv) {
  const bool nhwc = channels_last(a) || channels_last(b);
  try {
    conv(nhwc);
    return;
  } catch (const NoAlgorithm&) {
    if (!nhwc) throw;
  }
  conv(false);
}

// x without elements where the output has some (no input channels, or an empty image that
// padding alone gives an output): cuDNN describes no such tensor.
void refuse_empty_input(const View& x, const View& out, const char* op) {
  if (x.numel() == 0)
    throw std::invalid_argument(std::string("cuda ") + op + ": x " + shape_str(x.shape) +
                                " has no elements but the output " + shape_str(out.shape) +
                                " has: not supported on cuda");
}

void conv2d_forward(const View& y, const View& x, const View& w, const View* bias,
                    const Conv2dParams& p) {
  check_conv(x, w, y, p, "conv2d_forward");
  if (y.numel() == 0) return;
  refuse_empty_input(x, y, "conv2d_forward");
  in_either_layout(x, y, [&](bool nhwc) { forward_in(y, x, w, bias, p, nhwc); });
}

void conv2d_backward_data(const View& dx, const View& dy, const View& w, const Conv2dParams& p) {
  check_conv(dx, w, dy, p, "conv2d_backward_data");
  if (dx.numel() == 0) return;
  if (dy.numel() == 0) return fill(dx, 0.0);
  in_either_layout(dx, dy, [&](bool nhwc) { backward_data_in(dx, dy, w, p, nhwc); });
}

void conv2d_backward_weights(const View& dw, const View* db, const View& dy, const View& x,
                             const Conv2dParams& p) {
  check_conv(x, dw, dy, p, "conv2d_backward_weights");
  if (dy.numel() == 0) {
    fill(dw, 0.0);
    if (db) fill(*db, 0.0);
    return;
  }
  refuse_empty_input(x, dy, "conv2d_backward_weights");
  in_either_layout(x, dy, [&](bool nhwc) { backward_weights_in(dw, db, dy, x, p, nhwc); });
}

}  // namespace

void set_conv_kernels(Backend& b) {
  b.conv2d_forward = conv2d_forward;
  b.conv2d_backward_data = conv2d_backward_data;
  b.conv2d_backward_weights = conv2d_backward_weights;
}

}  // namespace ringflow::cuda

namespace ringflow {

std::vector<std::string> cudnn_conv_choices() {
  cuda::ChoiceCache& cache = cuda::choice_cache();
  std::lock_guard lock(cache.mutex);
  return cache.lines;
}

}  // namespace ringflow

#pragma GCC diagnostic pop
