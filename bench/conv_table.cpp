#include "ringflow/bench/conv_table.h"

#include <stdexcept>

namespace ringflow::bench {

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::forward: return "forward";
    case Pass::backward_data: return "backward-data";
    case Pass::backward_weights: return "backward-weights";
  }
  return "?";
}

nlohmann::json layer_json(const ConvLayer& l) {
  const Conv2dParams& p = l.params;
  if (p.pad_top != p.pad_bottom || p.pad_left != p.pad_right)
    throw std::invalid_argument("layer_json: " + l.name() + " pads asymmetrically (PyTorch's Conv2d cannot)");
  return {{"x", l.x},
          {"w", l.w},
          {"y", l.y},
          {"stride", {p.stride_h, p.stride_w}},
          {"padding", {p.pad_top, p.pad_left}},
          {"dilation", {p.dilation_h, p.dilation_w}},
          {"groups", 1},
          {"bias", l.bias}};
}

ConvLayer layer_from_json(const nlohmann::json& j) {
  if (j.value("groups", 1) != 1)
    throw std::invalid_argument("layer_from_json: grouped convolutions are not benchmarked: " + j.dump());
  ConvLayer l;
  l.x = j.at("x").get<Shape>();
  l.w = j.at("w").get<Shape>();
  l.y = j.at("y").get<Shape>();
  l.bias = j.at("bias").get<bool>();
  const auto pair = [&](const char* key) { return j.at(key).get<std::array<int64_t, 2>>(); };
  const auto [sh, sw] = pair("stride");
  const auto [ph, pw] = pair("padding");
  const auto [dh, dw] = pair("dilation");
  l.params = {sh, sw, ph, ph, pw, pw, dh, dw};
  return l;
}

size_t attach_torch_times(std::vector<ConvRow>& rows, const std::string& model, const std::string& output) {
  size_t matched = 0;
  for (size_t at = 0; at < output.size();) {
    const size_t end = std::min(output.find('\n', at), output.size());
    const std::string line = output.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    const ConvLayer t = layer_from_json(j);
    for (ConvRow& r : rows) {
      if (r.model != model || !r.layer.same_shape(t)) continue;
      const char* key = r.pass == Pass::forward         ? "forward_ms"
                        : r.pass == Pass::backward_data ? "backward_data_ms"
                                                        : "backward_weights_ms";
      r.torch_ms = j.at(key).get<double>();
      ++matched;
    }
  }
  return matched;
}

PassTotals pass_totals(const std::vector<ConvRow>& rows, const std::string& model, Pass pass) {
  PassTotals t;
  for (const ConvRow& r : rows) {
    if (r.model != model || r.pass != pass) continue;
    t.op_ms += r.layer.count * r.op_ms;
    t.raw_ms += r.layer.count * r.raw_ms;
    t.torch_ms += r.layer.count * r.torch_ms;
  }
  return t;
}

}  // namespace ringflow::bench
