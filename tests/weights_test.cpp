// Weights files (framework/weights.h): a model's state_dict alone, round trip; strict loading
// that lists every missing, unexpected and mismatched tensor before copying any; checkpoints
// accepted for their model.* tensors; values converted to the model's dtype. (PyTorch and
// torchvision reading and writing them: tests/torch_weights_test.py.)
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "ringflow/models/registry.h"
#include "ringflow/tests/testing.h"

using namespace ringflow;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ringflow_weights_" + std::to_string(getpid()) + "_" + name)).string();
}

nn::ModulePtr small_cnn(uint64_t seed) {
  Generator gen(seed);
  return models::make_model("small_cnn", 0, {.gen = &gen});
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void check_same_state(const nn::Module& a, const nn::Module& b) {
  const NamedTensors sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    CAPTURE(sa[i].first);
    CHECK(sa[i].first == sb[i].first);
    CHECK(sa[i].second.dtype() == sb[i].second.dtype());
    CHECK(sa[i].second.to_vector<double>() == sb[i].second.to_vector<double>());
  }
}

}  // namespace

TEST_CASE("save_weights writes the state_dict alone; load_weights restores it exactly") {
  const auto a = small_cnn(1), b = small_cnn(2);
  const std::string path = temp_path("round.safetensors");
  save_weights(path, *a, {{"note", "x"}});
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.metadata.at("note") == "x");
  std::set<std::string> names;
  for (const auto& [name, t] : a->state_dict()) names.insert(name);
  std::set<std::string> saved;
  for (const auto& [name, t] : f.tensors) saved.insert(name);
  CHECK(saved == names);  // bn1.num_batches_tracked and the running statistics included
  load_weights(path, *b);
  check_same_state(*a, *b);
  std::filesystem::remove(path);
}

TEST_CASE("load_weights is strict: every problem listed, with both shapes, nothing copied") {
  const auto a = small_cnn(1), b = small_cnn(2), before = small_cnn(2);
  NamedTensors state;
  for (const auto& [name, t] : a->state_dict()) {
    if (name == "bn1.bias") continue;  // missing
    state.emplace_back(name, name == "fc.weight" ? zeros({5, 32 * 7 * 7}) : t);  // mismatched
  }
  state.emplace_back("head.extra", zeros({3}));  // unexpected
  const std::string path = temp_path("bad.safetensors");
  save_safetensors(path, state);
  try {
    load_weights(path, *b);
    FAIL("loaded a file that does not fit");
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.rfind(path + ": load_state_dict into SmallCnn:", 0) == 0);
    CHECK(contains(msg, "missing keys: bn1.bias"));
    CHECK(contains(msg, "unexpected keys: head.extra"));
    CHECK(contains(msg, "shape mismatch: fc.weight: loaded (5, 1568), model (10, 1568)"));
  }
  check_same_state(*b, *before);
  std::filesystem::remove(path);
}

TEST_CASE("load_weights takes a checkpoint's model.* tensors, and converts dtypes") {
  const auto a = small_cnn(1), b = small_cnn(2), c = small_cnn(3);
  const std::string ckpt = temp_path("ckpt.safetensors"), f64 = temp_path("f64.safetensors");
  optim::SGD sgd(a->parameters(), {.lr = 0.1, .momentum = 0.9});
  save_checkpoint(ckpt, *a, sgd, {});
  load_weights(ckpt, *b);
  check_same_state(*a, *b);
  NamedTensors wide;  // f32 values in f64: converted back exactly
  for (const auto& [name, t] : a->state_dict())
    wide.emplace_back(name, is_floating(t.dtype()) ? t.to(DType::f64) : t);
  save_safetensors(f64, wide);
  load_weights(f64, *c);
  check_same_state(*a, *c);
  std::filesystem::remove(ckpt);
  std::filesystem::remove(f64);
}
