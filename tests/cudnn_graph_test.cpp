// cuDNN's graph API on the host (builds with cuDNN; no GPU needed): cuDNN itself checks and
// finalizes the operation graph that kernels/cuda/cudnn_graph.cpp builds for every
// convolution layer of VGG-11 and ResNet-18 (CIFAR) and ResNet-50 (224x224), in each
// direction, dtype and layout, and for asymmetric padding; a graph whose shapes disagree is
// refused with cuDNN's reason. Heuristics, plans and calls need the device: the cuda_conv
// test runs them there.
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/kernels/cuda/cudnn_graph.h"
#include "ringflow/tests/kernel_sweep.h"

namespace ringflow {
namespace {

using namespace sweep;
using cuda::ConvDirection;

struct Layer {
  int64_t C, K, HW, R, stride, pad;
};

// The distinct convolutions of the three models at batch 256 (CIFAR 32x32; ImageNet 224x224).
const std::vector<Layer> kLayers = {
    // VGG-11 (CIFAR)
    {3, 64, 32, 3, 1, 1}, {64, 128, 16, 3, 1, 1}, {128, 256, 8, 3, 1, 1}, {256, 256, 8, 3, 1, 1},
    {256, 512, 4, 3, 1, 1}, {512, 512, 4, 3, 1, 1}, {512, 512, 2, 3, 1, 1},
    // ResNet-18 (CIFAR): stem, blocks, stride-2 blocks and their 1x1 shortcuts
    {64, 64, 32, 3, 1, 1}, {64, 128, 32, 3, 2, 1}, {128, 128, 16, 3, 1, 1}, {64, 128, 32, 1, 2, 0},
    {128, 256, 16, 3, 2, 1}, {256, 512, 8, 3, 2, 1}, {256, 512, 8, 1, 2, 0},
    // ResNet-50 (224): the 7x7 stem and bottlenecks
    {3, 64, 224, 7, 2, 3}, {64, 64, 56, 1, 1, 0}, {64, 64, 56, 3, 1, 1}, {64, 256, 56, 1, 1, 0},
    {256, 128, 56, 1, 1, 0}, {128, 128, 56, 3, 2, 1}, {256, 512, 56, 1, 2, 0},
    {1024, 512, 14, 1, 1, 0}, {512, 512, 14, 3, 2, 1}, {2048, 512, 7, 1, 1, 0}};

Conv2dParams params_of(const Layer& l) {
  Conv2dParams p;
  p.stride_h = p.stride_w = l.stride;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = l.pad;
  return p;
}

// A view of `shape` in `layout` with no memory behind it: a graph needs only shapes, types
// and an address's alignment (256 bytes here, as the caching allocator's blocks).
View unbacked(const Shape& shape, DType dt, Layout layout) {
  View v;
  v.data = reinterpret_cast<void*>(uintptr_t{1} << 20);
  v.dtype = dt;
  v.shape = shape;
  v.strides = layout_strides(shape, layout);
  return v;
}

void build(ConvDirection d, const View& x, const View& w, const View& y, const Conv2dParams& p) {
  const auto spec = cuda::conv_graph_spec(d, x, w, y, p);
  REQUIRE(spec);
  const auto graph = cuda::build_conv_graph(*spec, /*handle=*/nullptr);
  CHECK(graph->graph.get() != nullptr);
}

TEST_CASE("cuDNN finalizes the graph of every model layer, direction, dtype and layout") {
  int graphs = 0;
  for (const Layer& l : kLayers) {
    const int64_t N = 256, P = (l.HW + 2 * l.pad - l.R) / l.stride + 1;
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      for (Layout layout : {Layout::nchw, Layout::nhwc}) {
        const View x = unbacked({N, l.C, l.HW, l.HW}, dt, layout), w = unbacked({l.K, l.C, l.R, l.R}, dt, layout);
        const View y = unbacked({N, l.K, P, P}, dt, layout);
        const std::string name = std::string(dtype_name(dt)) + (layout == Layout::nhwc ? " nhwc " : " nchw ") +
                                 shape_str(x.shape) + " w " + shape_str(w.shape);
        INFO(name);
        for (ConvDirection d : {ConvDirection::forward, ConvDirection::backward_data, ConvDirection::backward_filter}) {
          build(d, x, w, y, params_of(l));
          ++graphs;
        }
      }
    }
  }
  CHECK(graphs == static_cast<int>(kLayers.size()) * 4 * 2 * 3);
}

// What the graph API takes; cudnn_conv.cpp pads asymmetric convolutions explicitly instead
// (Note [Asymmetric padding on cuDNN]).
TEST_CASE("the graph API describes asymmetric padding as it is") {
  Conv2dParams p;
  p.pad_top = 0;
  p.pad_bottom = 1;
  p.pad_left = 2;
  p.pad_right = 1;
  p.stride_h = p.stride_w = 2;
  const View x = unbacked({2, 8, 9, 10}, DType::f32, Layout::nchw);
  const View w = unbacked({16, 8, 3, 3}, DType::f32, Layout::nchw);
  const View y = unbacked({2, 16, (9 + 1 - 3) / 2 + 1, (10 + 3 - 3) / 2 + 1}, DType::f32, Layout::nchw);
  const auto spec = cuda::conv_graph_spec(ConvDirection::forward, x, w, y, p);
  REQUIRE(spec);
  CHECK(spec->pre_padding == std::array<int64_t, 2>{0, 2});
  CHECK(spec->post_padding == std::array<int64_t, 2>{1, 1});
  for (ConvDirection d : {ConvDirection::forward, ConvDirection::backward_data, ConvDirection::backward_filter})
    build(d, x, w, y, p);
}

TEST_CASE("a graph whose output shape disagrees is refused with cuDNN's reason") {
  const View x = unbacked({2, 8, 9, 9}, DType::bf16, Layout::nhwc);
  const View w = unbacked({16, 8, 3, 3}, DType::bf16, Layout::nhwc);
  const View y = unbacked({2, 16, 8, 9}, DType::bf16, Layout::nhwc);  // 9x9 with padding 1 gives 9x9
  Conv2dParams p;
  p.pad_top = p.pad_bottom = p.pad_left = p.pad_right = 1;
  const auto spec = cuda::conv_graph_spec(ConvDirection::forward, x, w, y, p);
  REQUIRE(spec);
  try {
    cuda::build_conv_graph(*spec, nullptr);
    FAIL("cuDNN took a wrong output shape");
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.find("convolution operation") != std::string::npos);
    CHECK(what.find("CUDNN_STATUS_BAD_PARAM") != std::string::npos);
  }
}

}  // namespace
}  // namespace ringflow
