#include "ringflow/bench/conv_layers.h"

#include <tuple>

#include <fmt/core.h>

#include "ringflow/models/registry.h"

namespace ringflow::bench {
namespace {

// The layers the recording table's conv2d_forward saw (one forward on this thread at a time).
std::vector<ConvLayer>& recorded() {
  static std::vector<ConvLayer> layers;
  return layers;
}

// Notes each call's shapes; writes zeros rather than convolving (only the shapes are wanted,
// and ResNet-50's convolutions are most of its forward pass).
void recording_conv2d_forward(const View& y, const View& x, const View& w, const View* bias,
                              const Conv2dParams& p) {
  recorded().push_back({x.shape, w.shape, y.shape, p, bias != nullptr, 1});
  cpu_backend().fill(y, 0.0);
}

const Backend& recording_table() {
  static const Backend table = [] {
    Backend b = cpu_backend();
    b.conv2d_forward = recording_conv2d_forward;
    return b;
  }();
  return table;
}

}  // namespace

double ConvLayer::gflop() const {
  return 2.0 * double(shape_numel(y)) * double(w[1] * w[2] * w[3]) / 1e9;
}

std::string ConvLayer::name() const {
  std::string s = fmt::format("N{} {}x{}x{} -> {} {}x{}", x[0], x[1], x[2], x[3], w[0], w[2], w[3]);
  if (params.stride_h != 1 || params.stride_w != 1)
    s += params.stride_h == params.stride_w ? fmt::format(" s{}", params.stride_h)
                                            : fmt::format(" s{},{}", params.stride_h, params.stride_w);
  if (params.pad_top || params.pad_left)
    s += params.pad_top == params.pad_left ? fmt::format(" p{}", params.pad_top)
                                           : fmt::format(" p{},{}", params.pad_top, params.pad_left);
  return bias ? s + " +bias" : s;
}

bool ConvLayer::same_shape(const ConvLayer& o) const {
  const auto key = [](const ConvLayer& l) {
    const Conv2dParams& p = l.params;
    return std::tie(l.x, l.w, l.y, p.stride_h, p.stride_w, p.pad_top, p.pad_bottom, p.pad_left, p.pad_right,
                    p.dilation_h, p.dilation_w, l.bias);
  };
  return key(*this) == key(o);
}

std::vector<ConvLayer> conv_layers(const std::string& model, int64_t batch) {
  RF_CHECK(batch > 0, "conv_layers: the batch must be positive, got ", batch);
  const nn::ModulePtr m = models::make_model(model);
  m->eval();  // batch 1: a training batch norm would see one value per channel
  const std::vector<int64_t> chw = models::model_input_shape(model);
  Shape input{1};
  input.insert(input.end(), chw.begin(), chw.end());
  recorded().clear();
  {
    const NoGradGuard no_grad;
    const KernelTableGuard table(recording_table());
    m->forward(zeros(input));
  }
  std::vector<ConvLayer> layers = std::move(recorded());
  recorded().clear();
  for (ConvLayer& l : layers) l.x[0] = l.y[0] = batch;
  return layers;
}

std::vector<ConvLayer> distinct_layers(const std::vector<ConvLayer>& layers) {
  std::vector<ConvLayer> out;
  for (const ConvLayer& l : layers) {
    bool seen = false;
    for (ConvLayer& o : out)
      if (o.same_shape(l)) {
        ++o.count;
        seen = true;
      }
    if (!seen) out.push_back(l);
  }
  return out;
}

}  // namespace ringflow::bench
