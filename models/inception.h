// Inception-v3 as torchvision's inception_v3 (0.14): the same modules and names
// (`Conv2d_1a_3x3.conv`, `Mixed_5b.branch1x1.bn`, `AuxLogits.fc`, `fc`), BasicConv2d =
// conv (no bias) + BN(eps 1e-3) + ReLU, the optional auxiliary head after Mixed_6e, and its
// initialisation (truncated normal, std 0.1; 0.001 for AuxLogits.fc).
// No transform_input. Input (N, 3, 299, 299); forward() returns the main logits, and in
// training with the auxiliary head, forward_with_aux() returns both.
#pragma once

#include <memory>
#include <utility>

#include "ringflow/framework/nn/nn.h"

namespace ringflow::models {

class BasicConv2d : public nn::Module {
 public:
  BasicConv2d(int64_t in, int64_t out, std::array<int64_t, 2> kernel,
              std::array<int64_t, 2> stride, std::array<int64_t, 2> padding, Generator* gen);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

class InceptionV3 : public nn::Module {
 public:
  InceptionV3(int64_t num_classes = 1000, bool aux_logits = true, Generator* gen = nullptr,
              double dropout = 0.5);
  Tensor forward(const Tensor& x) override;  // (N, 3, 299, 299) -> (N, C)
  // (logits, aux logits); aux is undefined in eval or without the auxiliary head.
  std::pair<Tensor, Tensor> forward_with_aux(const Tensor& x);
  bool aux_logits() const { return aux_ != nullptr; }

 private:
  std::vector<nn::ModulePtr> stem_;       // Conv2d_1a_3x3 ... maxpool2
  std::vector<nn::ModulePtr> mixed_6_;    // Mixed_5b ... Mixed_6e
  nn::ModulePtr aux_;                     // AuxLogits or null
  std::vector<nn::ModulePtr> mixed_7_;    // Mixed_7a ... Mixed_7c
  std::shared_ptr<nn::Dropout> dropout_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace ringflow::models
