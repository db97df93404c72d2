#include "ringflow/framework/checkpoint.h"

#include <stdexcept>

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

uint64_t metadata_u64(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end())
    throw std::runtime_error("checkpoint '" + f.path + "': metadata '" + key + "' is missing");
  try {
    return std::stoull(it->second);
  } catch (const std::exception&) {
    throw std::runtime_error("checkpoint '" + f.path + "': metadata '" + key + "' = '" +
                             it->second + "' is not a non-negative integer");
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
  save_safetensors(path, tensors, metadata);
}

Checkpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer) {
  const SafetensorsFile f = load_safetensors(path);
  std::map<std::string, Tensor> model_state, optimizer_state;
  for (const auto& [name, t] : f.tensors) {
    if (starts_with(name, kModelPrefix))
      model_state[name.substr(std::string(kModelPrefix).size())] = t;
    else if (starts_with(name, kOptimizerPrefix))
      optimizer_state[name.substr(std::string(kOptimizerPrefix).size())] = t;
    else
      throw std::runtime_error("checkpoint '" + path + "': tensor '" + name +
                               "' is neither model.* nor optimizer.*");
  }
  Checkpoint c;
  c.position = {static_cast<int64_t>(metadata_u64(f, "epoch")),
                static_cast<int64_t>(metadata_u64(f, "iteration"))};
  for (const auto& [key, value] : f.metadata)
    if (starts_with(key, kInfoPrefix)) c.info[key.substr(std::string(kInfoPrefix).size())] = value;
  const auto seed = metadata_u64(f, "generator.seed");
  const auto counter = metadata_u64(f, "generator.counter");
  try {
    model.load_state_dict(model_state);
    optimizer.load_state_dict(optimizer_state);
  } catch (const std::exception& e) {
    throw std::runtime_error("checkpoint '" + path + "': " + e.what());
  }
  default_generator().manual_seed(seed);
  default_generator().set_counter(counter);
  return c;
}

}  // namespace ringflow
