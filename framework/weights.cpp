#include "ringflow/framework/weights.h"

#include <algorithm>
#include <stdexcept>

#include "ringflow/framework/serialize.h"

namespace ringflow {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// The model's tensors of a checkpoint (checkpoint.h's layout), or the file's as they are.
std::map<std::string, Tensor> model_tensors(const SafetensorsFile& f) {
  const auto& t = f.tensors;
  const bool checkpoint =
      std::all_of(t.begin(), t.end(), [](const auto& e) {
        return starts_with(e.first, "model.") || starts_with(e.first, "optimizer.");
      }) &&
      std::any_of(t.begin(), t.end(), [](const auto& e) { return starts_with(e.first, "optimizer."); });
  if (!checkpoint) return t;
  std::map<std::string, Tensor> model;
  for (const auto& [name, tensor] : t)
    if (starts_with(name, "model.")) model[name.substr(6)] = tensor;
  return model;
}

}  // namespace

void save_weights(const std::string& path, const nn::Module& model,
                  const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";
  save_safetensors(path, model.state_dict(), meta);
}

void load_weights(const std::string& path, nn::Module& model) {
  const SafetensorsFile f = load_safetensors(path);
  try {
    model.load_state_dict(model_tensors(f), /*strict=*/true);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

}  // namespace ringflow
