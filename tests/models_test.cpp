// models/: every registered model's parameter count and state_dict (keys, shapes, dtypes,
// buffers, order) against the reference PyTorch definitions, as written to
// tests/fixtures/models.json by tests/fixtures/make_models.py; output shapes of forwards;
// backward into gradient buffers without a copy.
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "ringflow/framework/ringflow.h"
#include "ringflow/kernels/simt/host_backend.h"
#include "ringflow/models/inception.h"
#include "ringflow/models/registry.h"
#include "ringflow/tests/testing.h"

using namespace ringflow;
using json = nlohmann::json;

namespace {

const json& fixture() {
  static const json table = [] {
    const std::string path = testing::source_path("tests/fixtures/models.json");
    REQUIRE_MESSAGE(std::filesystem::exists(path),
                    "missing fixture " << path << ": write it with `/usr/bin/python3 "
                                          "tests/fixtures/make_models.py` and commit it");
    std::ifstream in(path);
    return json::parse(in);
  }();
  return table;
}

Tensor input_for(const std::string& name, int64_t batch, Generator& gen) {
  Shape shape{batch};
  for (int64_t d : models::model_input_shape(name)) shape.push_back(d);
  return randn(shape, &gen);
}

}  // namespace

TEST_CASE("every registered model matches its PyTorch reference: count, keys, shapes") {
  const json& table = fixture();
  for (const std::string& name : models::model_names()) {
    CAPTURE(name);
    REQUIRE_MESSAGE(table.contains(name), name << " is not in models.json: re-run the script");
    const json& want = table.at(name);
    Generator gen(0);
    models::ModelOptions options;
    options.gen = &gen;
    nn::init::SkipInitGuard structure_only;  // 700M random draws would take half a minute
    const nn::ModulePtr model = models::make_model(name, 0, options);
    CHECK(model->num_parameters() == want.at("num_parameters").get<int64_t>());
    const NamedTensors state = model->state_dict();
    const json& entries = want.at("state_dict");
    CHECK(state.size() == entries.size());
    std::set<std::string> buffers;
    for (const auto& [k, v] : model->named_buffers()) buffers.insert(k);
    int shown = 0;
    for (size_t i = 0; i < std::min(state.size(), entries.size()); ++i) {
      const auto& [key, t] = state[i];
      const std::string want_key = entries[i][0].get<std::string>();
      const Shape want_shape = entries[i][1].get<Shape>();
      const std::string want_dtype = entries[i][2].get<std::string>();
      const bool want_buffer = entries[i][3].get<bool>();
      const bool ok = key == want_key && t.shape() == want_shape &&
                      want_dtype == dtype_name(t.dtype()) && want_buffer == buffers.count(key);
      if (!ok && shown++ < 5)
        FAIL_CHECK("entry " << i << ": " << key << " " << shape_str(t.shape()) << " "
                            << dtype_name(t.dtype()) << (buffers.count(key) ? " buffer" : "")
                            << " but PyTorch has " << want_key << " " << shape_str(want_shape)
                            << " " << want_dtype << (want_buffer ? " buffer" : ""));
    }
  }
}

TEST_CASE("the fixture holds no model the registry lacks") {
  const auto names = models::model_names();
  for (const auto& [name, entry] : fixture().items()) {
    if (name == "__meta__") continue;
    CHECK_MESSAGE(std::find(names.begin(), names.end(), name) != names.end(), name);
  }
}

TEST_CASE("unknown model names list the choices") {
  CHECK_THROWS_WITH_AS(models::make_model("resnet19"),
                       doctest::Contains("unknown model 'resnet19' (choices: inception_v3, mlp, "),
                       std::invalid_argument);
}

TEST_CASE("28x28 and CIFAR models: forward of a batch of 2 gives (2, classes)") {
  for (const std::string& name : models::model_names()) {
    const auto input = models::model_input_shape(name);
    if (input[1] > 32) continue;  // ImageNet sizes: below
    CAPTURE(name);
    Generator gen(1);
    models::ModelOptions options;
    options.gen = &gen;
    const nn::ModulePtr model = models::make_model(name, 0, options);
    const Tensor x = input_for(name, 2, gen);
    const Tensor y = model->forward(x);
    CHECK(y.shape() == Shape{2, 10});
    model->eval();
    NoGradGuard no_grad;
    CHECK(model->forward(x).shape() == Shape{2, 10});
  }
  CHECK(models::make_model("resnet18_cifar", 100)->forward(zeros({1, 3, 32, 32})).shape() ==
        Shape{1, 100});
}

TEST_CASE("a backward through a CIFAR ResNet reaches every parameter") {
  Generator gen(2);
  models::ModelOptions options;
  options.gen = &gen;
  const nn::ModulePtr model = models::make_model("resnet18_cifar", 0, options);
  Tensor loss = cross_entropy(model->forward(randn({2, 3, 32, 32}, &gen)),
                              from_vector({3, 7}, {2}, DType::i64));
  loss.backward();
  for (const auto& [name, p] : model->named_parameters()) CHECK_MESSAGE(p.grad().defined(), name);
}

// Note [Gradient buffers] (framework/autograd.h), DDP's buckets: every parameter of these
// models is of a conv2d, batch_norm or linear, whose backward computes into the buffer. One
// of each family (the deeper ones are made of the same layers). Under autocast the 16-bit
// casts' backward copies each gradient into its buffer, as the f32 gradient it makes anyway;
// on the CUDA table (run on the host) the fused batch norm + relu computes into it too.
static void check_grad_buffers(bool amp) {
  for (const std::string name : {"mlp", "small_cnn", "vgg11_cifar", "resnet18_cifar"}) {
    CAPTURE(name);
    CAPTURE(amp);
    Generator gen(3);
    models::ModelOptions options;
    options.gen = &gen;
    const nn::ModulePtr model = models::make_model(name, 0, options);
    const std::vector<Tensor> params = model->parameters();
    Tensor flat = zeros({model->num_parameters()});
    int64_t offset = 0;
    for (const Tensor& p : params) {
      set_grad_buffer(p, flat.narrow(0, offset, p.numel()).view(p.shape()));
      offset += p.numel();
    }
    const int64_t copied = grad_buffer_copy_bytes();
    Tensor loss;
    {
      std::optional<AutocastGuard> autocast;
      if (amp) autocast.emplace(DType::bf16);
      loss = cross_entropy(model->forward(input_for(name, 2, gen)), from_vector({3, 7}, {2}, DType::i64));
    }
    loss.backward();
    CHECK(grad_buffer_copy_bytes() == copied);
    for (const auto& [pname, p] : model->named_parameters())
      CHECK_MESSAGE(p.grad().shares_storage(flat), pname);
  }
}

TEST_CASE("mlp, small_cnn, VGG, ResNet: backward computes every gradient into its buffer, no copy") {
  SUBCASE("f32") { check_grad_buffers(/*amp=*/false); }
  SUBCASE("autocast bf16") { check_grad_buffers(/*amp=*/true); }
  SUBCASE("f32 on the CUDA table run on the host") {
    const KernelTableGuard table(simt_host_backend());
    check_grad_buffers(/*amp=*/false);
  }
}

TEST_CASE("ImageNet models at their input size (batch 1, eval)") {
  NoGradGuard no_grad;
  for (const char* name : {"resnet50"}) {  // inception_v3: the next test
    CAPTURE(name);
    Generator gen(3);
    models::ModelOptions options;
    options.gen = &gen;
    const nn::ModulePtr model = models::make_model(name, 0, options);
    model->eval();
    CHECK(model->forward(input_for(name, 1, gen)).shape() == Shape{1, 1000});
  }
}

TEST_CASE("Inception-v3's auxiliary head runs in training only") {
  Generator gen(4);
  models::InceptionV3 net(10, /*aux_logits=*/true, &gen);
  const Tensor x = randn({2, 3, 299, 299}, &gen);
  NoGradGuard no_grad;  // a forward only: the graph is not needed
  auto [logits, aux] = net.forward_with_aux(x);
  CHECK(logits.shape() == Shape{2, 10});
  REQUIRE(aux.defined());
  CHECK(aux.shape() == Shape{2, 10});
  net.eval();
  auto [eval_logits, eval_aux] = net.forward_with_aux(x.narrow(0, 0, 1));
  CHECK(eval_logits.shape() == Shape{1, 10});
  CHECK_FALSE(eval_aux.defined());
  models::InceptionV3 no_aux(10, /*aux_logits=*/false, &gen);
  CHECK_FALSE(no_aux.aux_logits());
}
