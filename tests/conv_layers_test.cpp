// bench/kernels --device cuda's layer list and table, without a device: the layers a forward
// pass records (bench/conv_layers.h) against the model's own Conv2d modules (count, weight
// shapes, stride, padding, bias) and the shapes conv2d gives; the distinct layers and their
// counts; PyTorch's JSON lines matched to the rows, and the totals weighed by count.
// tests/conv_layers_test.py compares the lists with PyTorch's models.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "ringflow/bench/conv_layers.h"
#include "ringflow/bench/conv_table.h"
#include "ringflow/framework/nn/conv2d.h"
#include "ringflow/models/registry.h"

using namespace ringflow;
using bench::ConvLayer;

namespace {

// (K, C, R, S, stride h, stride w, pad h, pad w, bias) of a layer or a module.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

Key key_of(const ConvLayer& l) {
  const Conv2dParams& p = l.params;
  return {l.w[0], l.w[1], l.w[2], l.w[3], p.stride_h, p.stride_w, p.pad_top, p.pad_left, l.bias};
}

std::vector<Key> module_keys(const std::string& model) {
  std::vector<Key> keys;
  const nn::ModulePtr m = models::make_model(model);
  for (const auto& [name, module] : m->named_modules()) {
    const auto* conv = dynamic_cast<const nn::Conv2d*>(module);
    if (!conv) continue;
    const nn::Conv2dOptions& o = conv->options();
    keys.emplace_back(o.out_channels, o.in_channels, o.kernel_size[0], o.kernel_size[1], o.stride[0], o.stride[1],
                      o.padding[0], o.padding[1], o.bias);
  }
  return keys;
}

}  // namespace

TEST_CASE("the layers of resnet18_cifar's forward pass are its Conv2d modules, with conv2d's shapes") {
  const int64_t batch = 8;
  const std::vector<ConvLayer> layers = bench::conv_layers("resnet18_cifar", batch);
  std::vector<Key> recorded, modules = module_keys("resnet18_cifar");
  for (const ConvLayer& l : layers) recorded.push_back(key_of(l));
  CHECK(layers.size() == 20);  // the stem, 16 in 8 blocks, 3 projection shortcuts
  CHECK(recorded.size() == modules.size());
  std::sort(recorded.begin(), recorded.end());
  std::sort(modules.begin(), modules.end());
  CHECK(recorded == modules);
  // The first sees the image; each output is conv2d's shape for its input; all at the batch.
  CHECK(layers.front().x == Shape{batch, 3, 32, 32});
  for (const ConvLayer& l : layers) {
    CAPTURE(l.name());
    CHECK(l.x[0] == batch);
    CHECK(l.x[1] == l.w[1]);
    CHECK(l.y == conv2d_output_shape(l.x, l.w, l.params));
  }
  // The last stage runs at 4x4 with 512 channels.
  CHECK(layers.back().y == Shape{batch, 512, 4, 4});

  const std::vector<ConvLayer> distinct = bench::distinct_layers(layers);
  int total = 0;
  for (size_t i = 0; i < distinct.size(); ++i) {
    total += distinct[i].count;
    for (size_t j = 0; j < i; ++j) CHECK_FALSE(distinct[i].same_shape(distinct[j]));
    const auto n = std::count_if(layers.begin(), layers.end(), [&](const ConvLayer& l) { return l.same_shape(distinct[i]); });
    CHECK(distinct[i].count == n);
  }
  CHECK(total == 20);
}

TEST_CASE("vgg11_cifar and resnet50: every Conv2d module called once, at the model's input size") {
  for (const char* model : {"vgg11_cifar", "resnet50"}) {
    CAPTURE(model);
    const std::vector<ConvLayer> layers = bench::conv_layers(model, 2);
    std::vector<Key> recorded, modules = module_keys(model);
    for (const ConvLayer& l : layers) recorded.push_back(key_of(l));
    std::sort(recorded.begin(), recorded.end());
    std::sort(modules.begin(), modules.end());
    CHECK(recorded == modules);
    const std::vector<int64_t> chw = models::model_input_shape(model);
    CHECK(layers.front().x == Shape{2, chw[0], chw[1], chw[2]});
  }
}

TEST_CASE("the table: PyTorch's JSON lines matched by shape, totals weighed by count") {
  std::vector<ConvLayer> distinct = bench::distinct_layers(bench::conv_layers("resnet18_cifar", 4));
  std::vector<bench::ConvRow> rows;
  for (const ConvLayer& l : distinct)
    for (bench::Pass pass : bench::kPasses) {
      bench::ConvRow r{"resnet18_cifar", l, pass};
      r.op_ms = 1.0 + l.count;
      r.raw_ms = 2.0;
      rows.push_back(r);
    }
  // PyTorch's output as bench/torch_conv_layers.py prints it: a line per layer (here in reverse
  // order, with a line that is no JSON), forward 0.5 ms, backward-data 0.25, backward-weights 1.
  std::string out = "PyTorch 2.x\n";
  for (auto it = distinct.rbegin(); it != distinct.rend(); ++it) {
    nlohmann::json j = bench::layer_json(*it);
    j["count"] = it->count;
    j["forward_ms"] = 0.5;
    j["backward_data_ms"] = 0.25;
    j["backward_weights_ms"] = 1.0;
    out += j.dump() + "\n";
  }
  CHECK(bench::attach_torch_times(rows, "resnet18_cifar", out) == rows.size());
  CHECK(bench::attach_torch_times(rows, "vgg11_cifar", out) == 0);  // another model's rows only
  int layers = 0;
  double op = 0;
  for (const ConvLayer& l : distinct) layers += l.count, op += l.count * (1.0 + l.count);
  for (bench::Pass pass : bench::kPasses) {
    CAPTURE(bench::pass_name(pass));
    const bench::PassTotals t = bench::pass_totals(rows, "resnet18_cifar", pass);
    CHECK(t.op_ms == doctest::Approx(op));
    CHECK(t.raw_ms == doctest::Approx(2.0 * layers));
    const double torch = pass == bench::Pass::forward ? 0.5 : pass == bench::Pass::backward_data ? 0.25 : 1.0;
    CHECK(t.torch_ms == doctest::Approx(torch * layers));
  }
  // A layer's JSON round-trips; a row without PyTorch's time makes its total NaN.
  CHECK(bench::layer_from_json(bench::layer_json(distinct[1])).same_shape(distinct[1]));
  rows.front().torch_ms = NAN;
  CHECK(std::isnan(bench::pass_totals(rows, "resnet18_cifar", rows.front().pass).torch_ms));
}
