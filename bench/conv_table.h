// The rows of bench/kernels --device cuda and what is computed from them without a device:
// one row per (model, distinct layer, pass) with ringflow's, raw cuDNN's and PyTorch's
// times; PyTorch's times taken from bench/torch_conv_layers.py's JSON lines by shape; a
// model's totals, each layer weighed by how many layers share its shape.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ringflow/bench/conv_layers.h"

namespace ringflow::bench {

enum class Pass { forward, backward_data, backward_weights };
inline constexpr Pass kPasses[] = {Pass::forward, Pass::backward_data, Pass::backward_weights};
const char* pass_name(Pass pass);  // "forward", "backward-data", "backward-weights"

struct ConvRow {
  std::string model;
  ConvLayer layer;
  Pass pass = Pass::forward;
  double op_ms = NAN, raw_ms = NAN, torch_ms = NAN;  // NaN: not measured
  double check = 0, tolerance = 0;  // op's result against raw's: rms(op - raw) / rms(raw)
  bool ok() const { return check <= tolerance; }
};

// A layer as bench/torch_conv_layers.py and --list-layers write it: x, w, y, stride, padding,
// dilation (pairs), groups, bias. Symmetric padding only (PyTorch's Conv2d); count not included.
nlohmann::json layer_json(const ConvLayer& layer);
ConvLayer layer_from_json(const nlohmann::json& j);

// Gives the rows of `model` PyTorch's times from the script's output (one JSON object per
// line, other lines ignored), matched by shape. Returns how many rows got one.
size_t attach_torch_times(std::vector<ConvRow>& rows, const std::string& model, const std::string& output);

// The sum over the model's rows of `pass` of count * ms (op, raw cuDNN, PyTorch); NaN where a
// row lacks the figure.
struct PassTotals {
  double op_ms = 0, raw_ms = 0, torch_ms = 0;
};
PassTotals pass_totals(const std::vector<ConvRow>& rows, const std::string& model, Pass pass);

}  // namespace ringflow::bench
