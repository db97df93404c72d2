// The `ringflow` extension module: its submodules, registered in sys.modules so that
// `import ringflow.nn` works as `from ringflow import nn` does, and filled by one file per area.
#include <pybind11/stl.h>

#include "ringflow/comm/base/build_info.h"
#include "ringflow/python/bindings.h"

namespace ringflow::python {
namespace {

py::module_ submodule(py::module_& parent, const char* name, const char* doc) {
  py::module_ m = parent.def_submodule(name, doc);
  py::module_::import("sys").attr("modules")[m.attr("__name__")] = m;
  return m;
}

// What `train --version` prints, as a dict: the build, its options, the CPU, the libraries.
py::dict build_info() {
  const BuildInfo b = comm::build_info();
  py::dict out;
  out["version"] = b.version;
  out["commit"] = b.commit;
  out["build_type"] = b.build_type;
  out["compiler"] = b.compiler;
  out["cuda"] = b.cuda;
  out["cudnn"] = b.cudnn;
  out["mpi"] = b.mpi;
  out["cpu"] = b.cpu.model;
  out["onednn_isa"] = b.cpu.onednn_isa;
  py::dict libraries;
  for (const LibraryVersion& l : b.libraries) libraries[py::str(l.name)] = l.version;
  out["libraries"] = libraries;
  return out;
}

}  // namespace
}  // namespace ringflow::python

PYBIND11_MODULE(ringflow, m) {
  using namespace ringflow::python;
  m.doc() = "ringflow: tensors, autograd, layers, optimizers, data loading and data-parallel "
            "training from C++, with PyTorch's names; tensors shared with NumPy and PyTorch "
            "without copies.";
  py::module_ nn = submodule(m, "nn", "Layers and Module, as torch.nn.");
  py::module_ functional = submodule(nn, "functional", "The layers as functions, as torch.nn.functional.");
  py::module_ nn_utils = submodule(nn, "utils", "clip_grad_norm_, as torch.nn.utils.");
  py::module_ models = submodule(m, "models", "The model registry: make(name), names().");
  py::module_ optim = submodule(m, "optim", "Optimizers and schedules, as torch.optim.");
  py::module_ data = submodule(m, "data", "Data sets, transforms, samplers, DataLoader.");
  py::module_ distributed = submodule(m, "distributed", "Process groups and DDP, as torch.distributed.");
  bind_types(m);
  bind_tensor(m);
  bind_modes(m);
  bind_creation(m);
  bind_ops(m, functional);
  bind_interop(m);
  bind_nn(nn, models);
  bind_optim(optim, nn_utils);
  bind_data(data);
  bind_distributed(distributed);
  bind_serialize(m);
  m.def("build_info", &ringflow::python::build_info, "What this build is and what it runs on.");
  m.attr("__version__") = ringflow::build_info().version;
}
