#include "ringflow/framework/checkpoint.h"

#include <charconv>
#include <sstream>
#include <stdexcept>

#include "ringflow/framework/error.h"
#include "ringflow/framework/random.h"
#include "ringflow/framework/serialize.h"

namespace ringflow {
namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kInfoPrefix = "info.";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

constexpr const char* kOptimizerManifest = "ringflow.optimizer_tensors";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("checkpoint '" + path + "': " + what);
}

// A whole decimal number: "1x", "-1" and "" are refused, naming the key and the file.
uint64_t metadata_u64(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) fail(f.path, "metadata '" + key + "' is missing");
  const std::string& text = it->second;
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    fail(f.path, "metadata '" + key + "' = '" + text + "' is not a non-negative integer");
  return value;
}

// The model's tensors as saved: every one there, each of the dtype the model holds (a
// conversion would change what is trained without a word).
void check_model_state(const std::string& path, const nn::Module& model,
                       const std::map<std::string, Tensor>& state) {
  for (const auto& [name, t] : model.state_dict()) {
    const auto it = state.find(name);
    if (it == state.end()) continue;  // load_state_dict names every missing key
    if (it->second.dtype() != t.dtype())
      fail(path, cat("tensor 'model.", name, "' is ", dtype_name(it->second.dtype()),
                     " but the model holds ", dtype_name(t.dtype())));
  }
}

// The optimizer's tensors as saved: 'lr', and every one the writer listed.
void check_optimizer_state(const SafetensorsFile& f, const std::map<std::string, Tensor>& state) {
  if (!state.count("lr")) fail(f.path, cat("tensor '", kOptimizerPrefix, "lr' is missing "
                                           "(--resume-model-only loads the model alone)"));
  const auto it = f.metadata.find(kOptimizerManifest);
  if (it == f.metadata.end()) return;  // written elsewhere: nothing listed
  std::string name;
  for (std::istringstream list(it->second); std::getline(list, name, ',');) {
    if (!state.count(name))
      fail(f.path, cat("tensor '", kOptimizerPrefix, name, "' is missing (the file lists it; "
                       "--resume-model-only loads the model alone)"));
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const TrainingPosition& position,
                     const std::map<std::string, std::string>& info) {
  NamedTensors tensors;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(kModelPrefix + name, t);
  for (const auto& [name, t] : optimizer.state_dict())
    tensors.emplace_back(kOptimizerPrefix + name, t);
  std::map<std::string, std::string> metadata{
      {"epoch", std::to_string(position.epoch)},
      {"iteration", std::to_string(position.iteration)},
      {"generator.seed", std::to_string(default_generator().seed())},
      {"generator.counter", std::to_string(default_generator().counter())},
  };
  for (const auto& [key, value] : info) metadata[kInfoPrefix + key] = value;
  std::string manifest;
  for (const auto& [name, t] : optimizer.state_dict()) manifest += (manifest.empty() ? "" : ",") + name;
  metadata[kOptimizerManifest] = manifest;
  save_safetensors(path, tensors, metadata);
}

Checkpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                           const CheckpointLoadOptions& options) {
  const SafetensorsFile f = load_safetensors(path);
  std::map<std::string, Tensor> model_state, optimizer_state;
  for (const auto& [name, t] : f.tensors) {
    if (starts_with(name, kModelPrefix))
      model_state[name.substr(std::string(kModelPrefix).size())] = t;
    else if (starts_with(name, kOptimizerPrefix))
      optimizer_state[name.substr(std::string(kOptimizerPrefix).size())] = t;
    else
      fail(path, "tensor '" + name + "' is neither model.* nor optimizer.*");
  }
  check_model_state(path, model, model_state);
  if (!options.model_only) check_optimizer_state(f, optimizer_state);
  // Model only: the position and the generator where the file has them (a file written by
  // another tool need not).
  const bool has_position = f.metadata.count("epoch") && f.metadata.count("iteration");
  const bool has_generator = f.metadata.count("generator.seed") && f.metadata.count("generator.counter");
  Checkpoint c;
  if (!options.model_only || has_position) {
    c.position = {static_cast<int64_t>(metadata_u64(f, "epoch")),
                  static_cast<int64_t>(metadata_u64(f, "iteration"))};
  }
  for (const auto& [key, value] : f.metadata)
    if (starts_with(key, kInfoPrefix)) c.info[key.substr(std::string(kInfoPrefix).size())] = value;
  const bool restore_generator = !options.model_only || has_generator;
  const uint64_t seed = restore_generator ? metadata_u64(f, "generator.seed") : 0;
  const uint64_t counter = restore_generator ? metadata_u64(f, "generator.counter") : 0;
  try {
    model.load_state_dict(model_state);
    if (!options.model_only) optimizer.load_state_dict(optimizer_state);
  } catch (const std::exception& e) {
    fail(path, e.what());
  }
  if (restore_generator) {
    default_generator().manual_seed(seed);
    default_generator().set_counter(counter);
  }
  return c;
}

}  // namespace ringflow
