// Checkpoints from Python: ringflow.save / ringflow.load of named tensors as safetensors (a
// state_dict keeps PyTorch's names, so safetensors.torch.load_file reads it into a torch
// model), and the training checkpoints of framework/checkpoint.h (model, optimizer, position).
#include <pybind11/stl.h>

#include <map>
#include <optional>
#include <string>

#include "ringflow/python/bindings.h"
#include "ringflow/framework/checkpoint.h"
#include "ringflow/framework/serialize.h"

namespace ringflow::python {
namespace {

using Info = std::map<std::string, std::string>;

void save(const py::object& state, const std::string& path, std::optional<Info> metadata) {
  NamedTensors named;
  for (const auto& [key, value] : py::cast<py::dict>(state)) named.emplace_back(key.cast<std::string>(), as_tensor(value));
  const Info meta = metadata.value_or(Info{{"format", "pt"}});
  py::gil_scoped_release release;
  save_safetensors(path, named, meta);
}

py::object load(const std::string& path) {
  const SafetensorsFile file = [&] {
    py::gil_scoped_release release;
    return load_safetensors(path);
  }();
  py::object ordered = py::module_::import("collections").attr("OrderedDict")();
  for (const auto& [name, t] : file.tensors) ordered[py::str(name)] = py::cast(t);
  return ordered;
}

py::dict load_checkpoint_into(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                              bool model_only, std::optional<Info> expect_info) {
  const Checkpoint c = [&] {
    py::gil_scoped_release release;
    return load_checkpoint(path, model, optimizer, {model_only, expect_info.value_or(Info{})});
  }();
  py::dict out;
  out["epoch"] = c.position.epoch;
  out["iteration"] = c.position.iteration;
  out["epoch_iteration"] = c.position.epoch_iteration;
  out["info"] = c.info;
  out["warnings"] = c.warnings;
  return out;
}

}  // namespace

void bind_serialize(py::module_& m) {
  m.def("save", &save, py::arg("obj"), py::arg("f"), py::arg("metadata") = py::none(),
        "Writes a mapping of names to tensors (a state_dict) to the safetensors file f, "
        "atomically; metadata: strings kept with it (default {'format': 'pt'}).");
  m.def("load", &load, py::arg("f"), "The tensors of a safetensors file, by name (on the cpu).");
  m.def("save_checkpoint", [](const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                              int64_t epoch, int64_t iteration, int64_t epoch_iteration, std::optional<Info> info) {
    save_checkpoint(path, model, optimizer, {epoch, iteration, epoch_iteration}, info.value_or(Info{}));
  }, py::arg("f"), py::arg("model"), py::arg("optimizer"), py::kw_only(), py::arg("epoch") = 0,
     py::arg("iteration") = 0, py::arg("epoch_iteration") = 0, py::arg("info") = py::none(), release_gil(),
     "The model's and optimizer's state, the position and the default generator, in one file.");
  m.def("load_checkpoint", &load_checkpoint_into, py::arg("f"), py::arg("model"), py::arg("optimizer"),
        py::kw_only(), py::arg("model_only") = false, py::arg("expect_info") = py::none(),
        "Restores model, optimizer and the default generator; returns the position and info.");
}

}  // namespace ringflow::python
