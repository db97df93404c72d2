#include "ringflow/models/inception.h"

#include <string>

namespace ringflow::models {

using namespace nn;

BasicConv2d::BasicConv2d(int64_t in, int64_t out, std::array<int64_t, 2> kernel,
                         std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                         Generator* gen)
    : Module("BasicConv2d") {
  Conv2dOptions o;
  o.in_channels = in;
  o.out_channels = out;
  o.kernel_size = kernel;
  o.stride = stride;
  o.padding = padding;
  o.bias = false;
  conv = register_module("conv", std::make_shared<Conv2d>(o, gen));
  BatchNormOptions bo;
  bo.eps = 0.001;
  bn = register_module("bn", std::make_shared<BatchNorm2d>(out, bo));
}

Tensor BasicConv2d::forward(const Tensor& x) { return relu(bn->forward(conv->forward(x))); }

namespace {

using A2 = std::array<int64_t, 2>;

// A module made of named BasicConv2d branches whose forward is a function of them.
class Block : public Module {
 public:
  Block(const char* type, Generator* gen) : Module(type), gen_(gen) {}
  std::shared_ptr<BasicConv2d> add(const std::string& name, int64_t in, int64_t out, A2 k,
                                   A2 stride = {1, 1}, A2 pad = {0, 0}) {
    auto m = std::make_shared<BasicConv2d>(in, out, k, stride, pad, gen_);
    register_module(name, m);
    by_name_.emplace_back(name, m);
    return m;
  }
  Tensor run(const std::string& name, const Tensor& x) const {
    for (const auto& [n, m] : by_name_)
      if (n == name) return m->forward(x);
    throw std::logic_error("inception: no branch " + name);
  }

 protected:
  Generator* gen_;
  std::vector<std::pair<std::string, std::shared_ptr<BasicConv2d>>> by_name_;
};

Tensor avg3(const Tensor& x) { return avg_pool2d(x, pool2d_params({3, 3}, A2{1, 1}, {1, 1})); }
Tensor max3s2(const Tensor& x) { return max_pool2d(x, pool2d_params({3, 3}, A2{2, 2})); }

class InceptionA : public Block {
 public:
  InceptionA(int64_t in, int64_t pool_features, Generator* gen) : Block("InceptionA", gen) {
    add("branch1x1", in, 64, {1, 1});
    add("branch5x5_1", in, 48, {1, 1});
    add("branch5x5_2", 48, 64, {5, 5}, {1, 1}, {2, 2});
    add("branch3x3dbl_1", in, 64, {1, 1});
    add("branch3x3dbl_2", 64, 96, {3, 3}, {1, 1}, {1, 1});
    add("branch3x3dbl_3", 96, 96, {3, 3}, {1, 1}, {1, 1});
    add("branch_pool", in, pool_features, {1, 1});
  }
  Tensor forward(const Tensor& x) override {
    Tensor b1 = run("branch1x1", x);
    Tensor b5 = run("branch5x5_2", run("branch5x5_1", x));
    Tensor b3 = run("branch3x3dbl_3", run("branch3x3dbl_2", run("branch3x3dbl_1", x)));
    Tensor bp = run("branch_pool", avg3(x));
    return cat({b1, b5, b3, bp}, 1);
  }
};

class InceptionB : public Block {
 public:
  InceptionB(int64_t in, Generator* gen) : Block("InceptionB", gen) {
    add("branch3x3", in, 384, {3, 3}, {2, 2});
    add("branch3x3dbl_1", in, 64, {1, 1});
    add("branch3x3dbl_2", 64, 96, {3, 3}, {1, 1}, {1, 1});
    add("branch3x3dbl_3", 96, 96, {3, 3}, {2, 2});
  }
  Tensor forward(const Tensor& x) override {
    Tensor b3 = run("branch3x3", x);
    Tensor bd = run("branch3x3dbl_3", run("branch3x3dbl_2", run("branch3x3dbl_1", x)));
    return cat({b3, bd, max3s2(x)}, 1);
  }
};

class InceptionC : public Block {
 public:
  InceptionC(int64_t in, int64_t c7, Generator* gen) : Block("InceptionC", gen) {
    add("branch1x1", in, 192, {1, 1});
    add("branch7x7_1", in, c7, {1, 1});
    add("branch7x7_2", c7, c7, {1, 7}, {1, 1}, {0, 3});
    add("branch7x7_3", c7, 192, {7, 1}, {1, 1}, {3, 0});
    add("branch7x7dbl_1", in, c7, {1, 1});
    add("branch7x7dbl_2", c7, c7, {7, 1}, {1, 1}, {3, 0});
    add("branch7x7dbl_3", c7, c7, {1, 7}, {1, 1}, {0, 3});
    add("branch7x7dbl_4", c7, c7, {7, 1}, {1, 1}, {3, 0});
    add("branch7x7dbl_5", c7, 192, {1, 7}, {1, 1}, {0, 3});
    add("branch_pool", in, 192, {1, 1});
  }
  Tensor forward(const Tensor& x) override {
    Tensor b1 = run("branch1x1", x);
    Tensor b7 = run("branch7x7_3", run("branch7x7_2", run("branch7x7_1", x)));
    Tensor bd = run("branch7x7dbl_1", x);
    for (const char* n : {"branch7x7dbl_2", "branch7x7dbl_3", "branch7x7dbl_4", "branch7x7dbl_5"})
      bd = run(n, bd);
    Tensor bp = run("branch_pool", avg3(x));
    return cat({b1, b7, bd, bp}, 1);
  }
};

class InceptionD : public Block {
 public:
  InceptionD(int64_t in, Generator* gen) : Block("InceptionD", gen) {
    add("branch3x3_1", in, 192, {1, 1});
    add("branch3x3_2", 192, 320, {3, 3}, {2, 2});
    add("branch7x7x3_1", in, 192, {1, 1});
    add("branch7x7x3_2", 192, 192, {1, 7}, {1, 1}, {0, 3});
    add("branch7x7x3_3", 192, 192, {7, 1}, {1, 1}, {3, 0});
    add("branch7x7x3_4", 192, 192, {3, 3}, {2, 2});
  }
  Tensor forward(const Tensor& x) override {
    Tensor b3 = run("branch3x3_2", run("branch3x3_1", x));
    Tensor b7 = run("branch7x7x3_1", x);
    for (const char* n : {"branch7x7x3_2", "branch7x7x3_3", "branch7x7x3_4"}) b7 = run(n, b7);
    return cat({b3, b7, max3s2(x)}, 1);
  }
};

class InceptionE : public Block {
 public:
  InceptionE(int64_t in, Generator* gen) : Block("InceptionE", gen) {
    add("branch1x1", in, 320, {1, 1});
    add("branch3x3_1", in, 384, {1, 1});
    add("branch3x3_2a", 384, 384, {1, 3}, {1, 1}, {0, 1});
    add("branch3x3_2b", 384, 384, {3, 1}, {1, 1}, {1, 0});
    add("branch3x3dbl_1", in, 448, {1, 1});
    add("branch3x3dbl_2", 448, 384, {3, 3}, {1, 1}, {1, 1});
    add("branch3x3dbl_3a", 384, 384, {1, 3}, {1, 1}, {0, 1});
    add("branch3x3dbl_3b", 384, 384, {3, 1}, {1, 1}, {1, 0});
    add("branch_pool", in, 192, {1, 1});
  }
  Tensor forward(const Tensor& x) override {
    Tensor b1 = run("branch1x1", x);
    Tensor b3 = run("branch3x3_1", x);
    b3 = cat({run("branch3x3_2a", b3), run("branch3x3_2b", b3)}, 1);
    Tensor bd = run("branch3x3dbl_2", run("branch3x3dbl_1", x));
    bd = cat({run("branch3x3dbl_3a", bd), run("branch3x3dbl_3b", bd)}, 1);
    Tensor bp = run("branch_pool", avg3(x));
    return cat({b1, b3, bd, bp}, 1);
  }
};

class InceptionAux : public Block {
 public:
  InceptionAux(int64_t in, int64_t num_classes, Generator* gen) : Block("InceptionAux", gen) {
    add("conv0", in, 128, {1, 1});
    add("conv1", 128, 768, {5, 5});
    fc = register_module("fc", std::make_shared<Linear>(768, num_classes, true, gen));
    init::trunc_normal_(fc->weight, 0.0, 0.001, -2, 2, gen);
  }
  Tensor forward(const Tensor& x) override {
    // (N, 768, 17, 17) -> (N, 768, 5, 5) -> (N, 128, 5, 5) -> (N, 768, 1, 1) -> (N, C)
    Tensor h = avg_pool2d(x, pool2d_params({5, 5}, A2{3, 3}));
    h = run("conv1", run("conv0", h));
    return fc->forward(flatten(adaptive_avg_pool2d(h, {1, 1}), 1));
  }
  std::shared_ptr<Linear> fc;
};

}  // namespace

InceptionV3::InceptionV3(int64_t num_classes, bool aux_logits, Generator* gen, double dropout)
    : Module("InceptionV3") {
  auto conv = [&](const char* name, int64_t in, int64_t out, A2 k, A2 s = {1, 1},
                  A2 p = {0, 0}) {
    stem_.push_back(register_module(name, std::make_shared<BasicConv2d>(in, out, k, s, p, gen)));
  };
  conv("Conv2d_1a_3x3", 3, 32, {3, 3}, {2, 2});
  conv("Conv2d_2a_3x3", 32, 32, {3, 3});
  conv("Conv2d_2b_3x3", 32, 64, {3, 3}, {1, 1}, {1, 1});
  stem_.push_back(register_module("maxpool1", std::make_shared<MaxPool2d>(3, 2)));
  conv("Conv2d_3b_1x1", 64, 80, {1, 1});
  conv("Conv2d_4a_3x3", 80, 192, {3, 3});
  stem_.push_back(register_module("maxpool2", std::make_shared<MaxPool2d>(3, 2)));
  auto mixed = [&](std::vector<ModulePtr>& list, const char* name, ModulePtr m) {
    list.push_back(register_module(name, std::move(m)));
  };
  mixed(mixed_6_, "Mixed_5b", std::make_shared<InceptionA>(192, 32, gen));
  mixed(mixed_6_, "Mixed_5c", std::make_shared<InceptionA>(256, 64, gen));
  mixed(mixed_6_, "Mixed_5d", std::make_shared<InceptionA>(288, 64, gen));
  mixed(mixed_6_, "Mixed_6a", std::make_shared<InceptionB>(288, gen));
  mixed(mixed_6_, "Mixed_6b", std::make_shared<InceptionC>(768, 128, gen));
  mixed(mixed_6_, "Mixed_6c", std::make_shared<InceptionC>(768, 160, gen));
  mixed(mixed_6_, "Mixed_6d", std::make_shared<InceptionC>(768, 160, gen));
  mixed(mixed_6_, "Mixed_6e", std::make_shared<InceptionC>(768, 192, gen));
  if (aux_logits)
    aux_ = register_module("AuxLogits", std::make_shared<InceptionAux>(768, num_classes, gen));
  mixed(mixed_7_, "Mixed_7a", std::make_shared<InceptionD>(768, gen));
  mixed(mixed_7_, "Mixed_7b", std::make_shared<InceptionE>(1280, gen));
  mixed(mixed_7_, "Mixed_7c", std::make_shared<InceptionE>(2048, gen));
  register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(dropout, gen));
  fc_ = register_module("fc", std::make_shared<Linear>(2048, num_classes, true, gen));

  // torchvision: every Conv2d and Linear weight ~ truncated N(0, stddev) in [-2, 2]; stddev
  // 0.1 unless the Conv2d/Linear itself carries one: only AuxLogits.fc (0.001, drawn above).
  // (AuxLogits.conv1's 0.01 sits on the BasicConv2d, not its Conv2d, so torchvision uses 0.1.)
  for (auto& [name, m] : named_modules()) {
    if (name == "AuxLogits.fc") continue;
    if (auto* c = dynamic_cast<Conv2d*>(m)) init::trunc_normal_(c->weight, 0.0, 0.1, -2, 2, gen);
    if (auto* l = dynamic_cast<Linear*>(m)) init::trunc_normal_(l->weight, 0.0, 0.1, -2, 2, gen);
  }
}

std::pair<Tensor, Tensor> InceptionV3::forward_with_aux(const Tensor& x) {
  Tensor h = x;  // (N, 3, 299, 299)
  for (auto& m : stem_) h = m->forward(h);     // (N, 192, 35, 35)
  for (auto& m : mixed_6_) h = m->forward(h);  // (N, 768, 17, 17)
  Tensor aux;
  if (aux_ && is_training()) aux = aux_->forward(h);
  for (auto& m : mixed_7_) h = m->forward(h);  // (N, 2048, 8, 8)
  h = flatten(adaptive_avg_pool2d(h, {1, 1}), 1);
  return {fc_->forward(dropout_->forward(h)), aux};
}

Tensor InceptionV3::forward(const Tensor& x) { return forward_with_aux(x).first; }

}  // namespace ringflow::models
