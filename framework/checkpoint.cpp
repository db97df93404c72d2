#include "ringflow/framework/checkpoint.h"

#include <charconv>
#include <set>
#include <sstream>
#include <stdexcept>

#include "ringflow/framework/error.h"
#include "ringflow/framework/printable.h"
#include "ringflow/framework/random.h"
#include "ringflow/framework/serialize.h"

namespace ringflow {
namespace {

constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kInfoPrefix = "info.";

// The optimizer's tensors as written, its parameter count, and the parameters that had no
// state yet (never stepped: unused, or an optimizer without state): together they say which
// state a whole file holds, so that a tensor missing from it is found even where the list
// was edited too.
constexpr const char* kOptimizerManifest = "ringflow.optimizer_tensors";
constexpr const char* kOptimizerParameters = "ringflow.optimizer_parameters";
constexpr const char* kOptimizerStateless = "ringflow.optimizer_stateless";

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(printable("checkpoint '" + path + "': " + what));
}

[[noreturn]] void fail_optimizer(const std::string& path, const std::string& what) {
  throw OptimizerStateMissing(printable("checkpoint '" + path + "': " + what));
}

void append_item(std::string& list, const std::string& item) {
  if (!list.empty()) list += ',';
  list += item;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::string item;
  for (std::istringstream in(list); std::getline(in, item, ',');) items.push_back(item);
  return items;
}

// A whole decimal number in [0, max]: "1x", "-1", "" and 2^64 - 1 (where max is less) are
// refused, naming the key and the file.
uint64_t metadata_u64(const SafetensorsFile& f, const std::string& key, uint64_t max = UINT64_MAX) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) fail(f.path, "metadata '" + key + "' is missing");
  const std::string& text = it->second;
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc::result_out_of_range || (error == std::errc() && value > max))
    fail(f.path, cat("metadata '", key, "' = '", text, "' is out of range (at most ", max, ")"));
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    fail(f.path, "metadata '" + key + "' = '" + text + "' is not a non-negative integer");
  return value;
}

// Info the caller expects, checked before any tensor: "of model 'mlp', not 'small_cnn'".
void check_expected_info(const SafetensorsFile& f, const std::map<std::string, std::string>& expect) {
  for (const auto& [key, value] : expect) {
    const auto it = f.metadata.find(kInfoPrefix + key);
    if (it != f.metadata.end() && it->second != value)
      fail(f.path, cat("the checkpoint is of ", key, " '", it->second, "', not '", value, "'"));
  }
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

// "state.<i>.<key>" -> i; npos for other names (load_state_dict refuses those).
size_t state_index(const std::string& name) {
  if (!starts_with(name, "state.")) return std::string::npos;
  size_t i = 0;
  const char* begin = name.data() + 6;
  const auto [end, error] = std::from_chars(begin, name.data() + name.size(), i);
  return error == std::errc() && end != begin && *end == '.' ? i : std::string::npos;
}

// Parameter i's name in the model, where the optimizer's parameter i is one of its own.
std::string parameter_name(const nn::Module& model, const optim::Optimizer& optimizer, size_t i) {
  for (const auto& [name, p] : model.named_parameters())
    if (p.impl() == optimizer.params()[i].impl()) return " (" + name + ")";
  return "";
}

// Every parameter has the state the file says it has: all of the optimizer's keys, unless
// the writer listed it as stateless. A file without the lists (an older ringflow) holds
// state for every parameter or for none.
void check_optimizer_coverage(const SafetensorsFile& f, const std::map<std::string, Tensor>& state,
                              const nn::Module& model, const optim::Optimizer& optimizer) {
  const size_t n = optimizer.params().size();
  std::set<size_t> stateless;
  if (f.metadata.count(kOptimizerParameters)) {
    const uint64_t written = metadata_u64(f, kOptimizerParameters);
    if (written != n)
      fail(f.path, cat("the optimizer state is of ", written, " parameters, but this optimizer has ", n));
    const auto it = f.metadata.find(kOptimizerStateless);
    for (const std::string& item : split(it == f.metadata.end() ? "" : it->second)) {
      size_t i = 0;
      const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), i);
      if (error != std::errc() || end != item.data() + item.size() || i >= n)
        fail(f.path, cat("metadata '", kOptimizerStateless, "' holds '", item,
                         "', not a parameter index below ", n));
      stateless.insert(i);
    }
  } else {
    bool any = false;
    for (const auto& [name, t] : state) any = any || state_index(name) != std::string::npos;
    if (!any) return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (stateless.count(i)) continue;
    for (const std::string& key : optimizer.state_keys()) {
      const std::string name = cat("state.", i, ".", key);
      if (!state.count(name))
        fail_optimizer(f.path, cat("parameter ", i, parameter_name(model, optimizer, i), " has no "
                                   "optimizer state: tensor '", kOptimizerPrefix, name, "' is "
                                   "missing, and its ", key, " would restart from zero"));
    }
  }
}

// The optimizer's tensors as saved: 'lr', every one the writer listed, and state for every
// parameter that had some.
void check_optimizer_state(const SafetensorsFile& f, const std::map<std::string, Tensor>& state,
                           const nn::Module& model, const optim::Optimizer& optimizer) {
  if (!state.count("lr")) fail_optimizer(f.path, cat("tensor '", kOptimizerPrefix, "lr' is missing"));
  if (const auto it = f.metadata.find(kOptimizerManifest); it != f.metadata.end()) {
    for (const std::string& name : split(it->second)) {
      if (!state.count(name))
        fail_optimizer(f.path, cat("tensor '", kOptimizerPrefix, name, "' is missing (the file lists it)"));
    }
  }
  check_optimizer_coverage(f, state, model, optimizer);
}

// Model only: the position where the file has one (a file written by another tool need not).
TrainingPosition read_position(const SafetensorsFile& f, bool model_only) {
  TrainingPosition p;
  const bool has_position = f.metadata.count("epoch") && f.metadata.count("iteration");
  if (model_only && !has_position) return p;
  p.epoch = static_cast<int64_t>(metadata_u64(f, "epoch", kMaxCheckpointEpoch));
  p.iteration = static_cast<int64_t>(metadata_u64(f, "iteration", kMaxCheckpointIteration));
  if (f.metadata.count("epoch_iteration")) {  // older files: always at an epoch's end
    p.epoch_iteration = static_cast<int64_t>(
        metadata_u64(f, "epoch_iteration", static_cast<uint64_t>(p.iteration)));
  }
  return p;
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const TrainingPosition& position,
                     const std::map<std::string, std::string>& info) {
  NamedTensors tensors;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(kModelPrefix + name, t);
  const std::map<std::string, Tensor> optimizer_state = optimizer.state_dict();
  std::string manifest, stateless;
  std::set<size_t> with_state;
  for (const auto& [name, t] : optimizer_state) {
    tensors.emplace_back(kOptimizerPrefix + name, t);
    append_item(manifest, name);
    with_state.insert(state_index(name));
  }
  for (size_t i = 0; i < optimizer.params().size(); ++i)
    if (!with_state.count(i)) append_item(stateless, std::to_string(i));
  std::map<std::string, std::string> metadata{
      {"epoch", std::to_string(position.epoch)},
      {"iteration", std::to_string(position.iteration)},
      {"epoch_iteration", std::to_string(position.epoch_iteration)},
      {"generator.seed", std::to_string(default_generator().seed())},
      {"generator.counter", std::to_string(default_generator().counter())},
      {kOptimizerManifest, manifest},
      {kOptimizerParameters, std::to_string(optimizer.params().size())},
      {kOptimizerStateless, stateless},
  };
  for (const auto& [key, value] : info) metadata[kInfoPrefix + key] = value;
  save_safetensors(path, tensors, metadata);
}

Checkpoint load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                           const CheckpointLoadOptions& options) {
  const SafetensorsFile f = load_safetensors(path);
  check_expected_info(f, options.expect_info);
  std::map<std::string, Tensor> model_state, optimizer_state;
  for (const auto& [name, t] : f.tensors) {
    if (starts_with(name, kModelPrefix))
      model_state[name.substr(std::string(kModelPrefix).size())] = t;
    else if (starts_with(name, kOptimizerPrefix))
      optimizer_state[name.substr(std::string(kOptimizerPrefix).size())] = t;
    else
      fail(path, "tensor '" + name + "' is neither model.* nor optimizer.*");
  }
  Checkpoint c;
  c.position = read_position(f, options.model_only);
  for (const auto& [key, value] : f.metadata)
    if (starts_with(key, kInfoPrefix)) c.info[key.substr(std::string(kInfoPrefix).size())] = value;
  if (!f.has_checksum)
    c.warnings.push_back(printable(cat("checkpoint '", path, "' has no integrity checksum "
                                       "(ringflow.data_crc32): its data cannot be verified")));
  // Model only: the generator where the file has it.
  const bool has_generator = f.metadata.count("generator.seed") && f.metadata.count("generator.counter");
  const bool restore_generator = !options.model_only || has_generator;
  const uint64_t seed = restore_generator ? metadata_u64(f, "generator.seed") : 0;
  const uint64_t counter = restore_generator ? metadata_u64(f, "generator.counter") : 0;
  // The model first: where it is another model, that is what the message says. Each
  // load_state_dict checks everything before it copies anything.
  check_model_state(path, model, model_state);
  try {
    model.load_state_dict(model_state);
  } catch (const std::exception& e) {
    fail(path, e.what());
  }
  if (!options.model_only) {
    check_optimizer_state(f, optimizer_state, model, optimizer);
    try {
      optimizer.load_state_dict(optimizer_state);
    } catch (const std::exception& e) {
      fail(path, e.what());
    }
  }
  if (restore_generator) {
    default_generator().manual_seed(seed);
    default_generator().set_counter(counter);
  }
  return c;
}

}  // namespace ringflow
