// ringflow.distributed, as torch.distributed: init_process_group() meets the other ranks that
// mpiexec (or srun with PMI) started, or that torchrun's (or Slurm's) variables describe;
// collectives on the default group (all_reduce, broadcast, ...; async_op=True returns the
// Work); DistributedDataParallel over a module (buckets overlapped with backward, no_sync()).
// Collectives and waits release the GIL. Failed collectives raise CommError (a RuntimeError).
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ringflow/python/bindings.h"
#include "ringflow/comm/ddp/comm_hooks.h"
#include "ringflow/comm/ddp/ddp.h"
#include "ringflow/comm/group/launch_group.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/comm/group/nccl_process_group.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow::python {
namespace {

using Seconds = std::chrono::duration<double>;

// The default group: the launched one, and the NCCL group over it for backend "nccl".
struct DefaultGroup {
  comm::LaunchedGroup launched;
  std::shared_ptr<comm::ProcessGroup> pg;
  comm::Timeout timeout = comm::kDefaultTimeout;
};

std::unique_ptr<DefaultGroup>& default_group() {
  static std::unique_ptr<DefaultGroup> group;
  return group;
}

DefaultGroup& initialized() {
  if (!default_group())
    throw std::runtime_error("Default process group has not been initialized, please make sure to "
                             "call init_process_group.");
  return *default_group();
}

comm::Timeout timeout_of(const std::optional<Seconds>& t, comm::Timeout fallback) {
  return t ? std::chrono::duration_cast<comm::Timeout>(*t) : fallback;
}

// init_process_group's backend: the launcher's group, or NCCL over it.
enum class Backend { automatic, mpi, nccl };
const char* backend_name(Backend b) { return b == Backend::mpi ? "mpi" : b == Backend::nccl ? "nccl" : "auto"; }
constexpr Backend kBackends[] = {Backend::automatic, Backend::mpi, Backend::nccl};
constexpr comm::GroupTransport kTransports[] = {comm::GroupTransport::automatic, comm::GroupTransport::shm,
                                                comm::GroupTransport::hybrid, comm::GroupTransport::tcp,
                                                comm::GroupTransport::mpi};
constexpr comm::Launcher kLaunchers[] = {comm::Launcher::automatic, comm::Launcher::mpi, comm::Launcher::env};
constexpr comm::CommHookKind kCommHooks[] = {comm::CommHookKind::allreduce, comm::CommHookKind::fp16,
                                             comm::CommHookKind::noop};

// Note [a rank that raises]: a rank ended by an uncaught exception would otherwise wait at
// exit in MPI_Finalize for the other ranks, which wait for it in their next collective, until
// the launcher's or the test's timeout. As mpi4py's `python -m mpi4py`, sys.excepthook then
// also marks MPI to be aborted at exit, so mpiexec stops every rank (torchrun stops them when
// this one exits non-zero). Installed once, after Python's own hook has printed the error.
void abort_job_on_uncaught_exception() {
  static bool installed = false;
  if (installed) return;
  py::gil_scoped_acquire gil;  // init_process_group runs without it
  py::module_ sys = py::module_::import("sys");
  py::object previous = sys.attr("excepthook");
  sys.attr("excepthook") = py::cpp_function([previous](py::object type, py::object value, py::object trace) {
    previous(type, value, trace);
    comm::abort_mpi_at_exit();
  });
  installed = true;
}

// backend: "mpi" or "auto" (None) for the launcher's group (MPI under mpiexec, ringflow's
// transports under torchrun's variables), "nccl" for NCCL over it. transport and launcher as
// the train app's --transport and --launcher.
void init_process_group(std::optional<std::string> backend, std::optional<Seconds> timeout,
                        const std::string& transport, const std::string& launcher,
                        std::optional<int> device_id) {
  if (default_group()) throw std::runtime_error("init_process_group: the default process group is already initialized");
  const Backend b = from_name("init_process_group: backend", backend.value_or("auto"), kBackends, backend_name);
  const comm::GroupTransport t = from_name("init_process_group: transport", transport, kTransports,
                                           comm::group_transport_name);
  const comm::Launcher l = from_name("init_process_group: launcher", launcher, kLaunchers, comm::launcher_name);
  auto group = std::make_unique<DefaultGroup>();
  group->timeout = timeout_of(timeout, comm::kDefaultTimeout);
  group->launched = comm::launch_group(
      {.launcher = b == Backend::mpi ? comm::Launcher::mpi : l, .transport = t,
       .socket_interface = "", .checking = false, .timeout = group->timeout});
  group->pg = group->launched.group;
  if (b == Backend::nccl) {
    auto nccl = std::make_shared<comm::NcclProcessGroup>(
        *group->launched.group, comm::NcclProcessGroupOptions{device_id.value_or(-1), group->timeout});
    set_cuda_device(nccl->device());
    group->pg = nccl;
  }
  default_group() = std::move(group);
  abort_job_on_uncaught_exception();
}

// Groups that destroy_process_group() closed. Python may still hold one (dist.group(), a
// DistributedDataParallel): a collective on it raises rather than run on a group the program
// let go of. Weak: a group no one holds is gone, and its address may be reused. Read and
// written with the GIL released, hence the lock.
struct ClosedGroups {
  std::mutex mutex;
  std::vector<std::weak_ptr<comm::ProcessGroup>> groups;
};

ClosedGroups& closed_groups() {
  static ClosedGroups closed;
  return closed;
}

void check_open(const comm::ProcessGroup& pg, const std::string& what) {
  ClosedGroups& closed = closed_groups();
  std::lock_guard lock(closed.mutex);
  std::erase_if(closed.groups, [](const auto& w) { return w.expired(); });
  for (const auto& w : closed.groups)
    if (w.lock().get() == &pg)
      throw std::runtime_error(what + ": the process group was destroyed (destroy_process_group()); "
                               "call init_process_group() for a new one");
}

void destroy_process_group() {
  if (!default_group()) return;
  {
    ClosedGroups& closed = closed_groups();
    std::lock_guard lock(closed.mutex);
    closed.groups.push_back(default_group()->pg);
    closed.groups.push_back(default_group()->launched.group);  // under an NCCL group
  }
  default_group().reset();
}

comm::ProcessGroup& group_or_default(comm::ProcessGroup* pg, const char* what) {
  if (!pg) return *initialized().pg;
  check_open(*pg, what);
  return *pg;
}

// The collective's Work, or None once waited for (async_op=False).
std::optional<std::shared_ptr<comm::Work>> finish(std::shared_ptr<comm::Work> work, bool async_op) {
  if (async_op) return work;
  work->wait();
  return std::nullopt;
}

comm::CollectiveOptions options(comm::ReduceOp op, int root, const std::string& algorithm) {
  return {op, comm::algorithm_from_name(algorithm), root, initialized().timeout};
}

void bind_group(py::module_& m) {
  py::register_exception<comm::CommError>(m, "CommError", PyExc_RuntimeError);
  py::enum_<comm::ReduceOp>(m, "ReduceOp")
      .value("SUM", comm::ReduceOp::sum)
      .value("AVG", comm::ReduceOp::avg)
      .value("MAX", comm::ReduceOp::max)
      .value("MIN", comm::ReduceOp::min);
  py::class_<comm::Work, std::shared_ptr<comm::Work>>(m, "Work")
      .def("wait", [](comm::Work& w, std::optional<Seconds> timeout) {
        if (timeout) w.wait(timeout_of(timeout, comm::kDefaultTimeout));
        else w.wait();
        return true;
      }, py::arg("timeout") = py::none(), release_gil())
      .def("is_completed", &comm::Work::is_completed)
      .def("is_success", &comm::Work::is_success)
      .def("__repr__", [](const comm::Work& w) { return "<Work " + w.description() + ": " + w.status() + ">"; });
  py::class_<comm::ProcessGroup, std::shared_ptr<comm::ProcessGroup>>(m, "ProcessGroup")
      .def("rank", &comm::ProcessGroup::rank)
      .def("size", &comm::ProcessGroup::size)
      .def("backend_name", &comm::ProcessGroup::backend_name);
  m.def("init_process_group", &init_process_group, py::arg("backend") = py::none(),
        py::arg("timeout") = py::none(), py::kw_only(), py::arg("transport") = "auto",
        py::arg("launcher") = "auto", py::arg("device_id") = py::none(), release_gil(),
        "Meets the ranks that mpiexec or torchrun started (collective).");
  m.def("is_initialized", [] { return static_cast<bool>(default_group()); });
  m.def("destroy_process_group", &destroy_process_group, release_gil(),
        "Closes the default group: collectives on it (a DistributedDataParallel's too) raise after.");
  m.def("get_rank", [] { return initialized().pg->rank(); });
  m.def("get_world_size", [] { return initialized().pg->size(); });
  m.def("get_backend", [] { return initialized().pg->backend_name(); });
  m.def("get_local_rank", [] { return initialized().launched.node.local_rank; });
  m.def("get_local_world_size", [] { return initialized().launched.node.local_size; });
  m.def("launch_description", [] {
    const comm::LaunchedGroup& l = initialized().launched;
    return l.how + ", transport " + l.transport;
  }, "How the ranks were started and what they talk through.");
  m.def("group", [] { return initialized().pg; }, "The default process group.");
}

void bind_collectives(py::module_& m) {
  const auto pg_arg = py::arg("group") = py::none();
  m.def("all_reduce", [](const Tensor& t, comm::ReduceOp op, comm::ProcessGroup* pg, bool async_op,
                         const std::string& algorithm) {
    return finish(group_or_default(pg, "all_reduce").allreduce(t, options(op, 0, algorithm)), async_op);
  }, py::arg("tensor"), py::arg("op") = comm::ReduceOp::sum, pg_arg, py::arg("async_op") = false,
     py::arg("algorithm") = "auto", release_gil());
  m.def("broadcast", [](const Tensor& t, int src, comm::ProcessGroup* pg, bool async_op) {
    return finish(group_or_default(pg, "broadcast").broadcast(t, options(comm::ReduceOp::sum, src, "auto")), async_op);
  }, py::arg("tensor"), py::arg("src") = 0, pg_arg, py::arg("async_op") = false, release_gil());
  m.def("reduce", [](const Tensor& t, int dst, comm::ReduceOp op, comm::ProcessGroup* pg, bool async_op) {
    return finish(group_or_default(pg, "reduce").reduce(t, options(op, dst, "auto")), async_op);
  }, py::arg("tensor"), py::arg("dst") = 0, py::arg("op") = comm::ReduceOp::sum, pg_arg,
     py::arg("async_op") = false, release_gil());
  m.def("all_gather_into_tensor", [](const Tensor& out, const Tensor& in, comm::ProcessGroup* pg, bool async_op) {
    return finish(group_or_default(pg, "all_gather_into_tensor").allgather(out, in, options(comm::ReduceOp::sum, 0, "auto")), async_op);
  }, py::arg("output_tensor"), py::arg("input_tensor"), pg_arg, py::arg("async_op") = false, release_gil());
  m.def("reduce_scatter_tensor", [](const Tensor& out, const Tensor& in, comm::ReduceOp op,
                                    comm::ProcessGroup* pg, bool async_op) {
    return finish(group_or_default(pg, "reduce_scatter_tensor").reduce_scatter(out, in, options(op, 0, "auto")), async_op);
  }, py::arg("output"), py::arg("input"), py::arg("op") = comm::ReduceOp::sum, pg_arg,
     py::arg("async_op") = false, release_gil());
  m.def("barrier", [](comm::ProcessGroup* pg, bool async_op) {
    return finish(group_or_default(pg, "barrier").barrier(options(comm::ReduceOp::sum, 0, "auto")), async_op);
  }, pg_arg, py::arg("async_op") = false, release_gil());
}

// DistributedDataParallel keeps the module's Python object: ddp.module is the model given,
// and attributes it lacks (parameters, state_dict, train, eval, ...) are the module's.
struct Ddp {
  py::object module;
  std::shared_ptr<comm::ProcessGroup> pg;
  std::unique_ptr<comm::DistributedDataParallel> ddp;

  Tensor forward(const Tensor& x) {
    check_open(*pg, "DistributedDataParallel");
    return ddp->forward(x);
  }
};

struct NoSyncScope {
  explicit NoSyncScope(py::object ddp) : owner(std::move(ddp)) {}
  py::object owner;  // the Ddp
  std::optional<comm::DistributedDataParallel::NoSync> guard;
};

Ddp make_ddp(const py::object& module, std::shared_ptr<comm::ProcessGroup> pg, double bucket_cap_mb,
             bool broadcast_buffers, bool find_unused, const std::string& algorithm,
             const std::string& comm_hook) {
  comm::DdpOptions o;  // the names first: refused whether or not a group exists
  o.comm_hook = comm::make_comm_hook(from_name("comm_hook", comm_hook, kCommHooks, comm::comm_hook_name));
  o.algorithm = comm::algorithm_from_name(algorithm);
  nn::ModulePtr held = hold_module(module, "DistributedDataParallel");
  if (pg) check_open(*pg, "DistributedDataParallel");
  else pg = initialized().pg;
  o.bucket_cap_mb = bucket_cap_mb;
  o.broadcast_buffers = broadcast_buffers;
  o.find_unused_parameters = find_unused;
  o.timeout = initialized().timeout;
  py::gil_scoped_release release;  // construction is collective
  return Ddp{module, pg, std::make_unique<comm::DistributedDataParallel>(held, pg, o)};
}

void bind_ddp(py::module_& m) {
  py::class_<NoSyncScope>(m, "_NoSync")
      .def("__enter__", [](NoSyncScope& s) { s.guard.emplace(*s.owner.cast<Ddp&>().ddp); })
      .def("__exit__", [](NoSyncScope& s, const py::args&) {
        s.guard.reset();
        return false;
      });
  py::class_<Ddp>(m, "DistributedDataParallel",
      "Data-parallel training of a module: construction broadcasts rank 0's state; a training "
      "forward's backward averages the gradients over the ranks, bucketed and overlapped. Its "
      "state_dict is the module's (no 'module.' prefix).")
      .def(py::init(&make_ddp), py::arg("module"), py::arg("process_group") = py::none(),
           py::arg("bucket_cap_mb") = 25.0, py::arg("broadcast_buffers") = true,
           py::arg("find_unused_parameters") = false, py::kw_only(), py::arg("algorithm") = "auto",
           py::arg("comm_hook") = "allreduce")
      .def("forward", &Ddp::forward, py::arg("input"), release_gil())
      .def("__call__", &Ddp::forward, py::arg("input"), release_gil())
      .def_readonly("module", &Ddp::module)
      .def("no_sync", [](const py::object& self) { return std::make_unique<NoSyncScope>(self); },
           "Inside, training forwards' backwards accumulate gradients locally (no communication).")
      .def("register_comm_hook", [](Ddp& d, const std::string& name) {
        d.ddp->register_comm_hook(comm::make_comm_hook(from_name("hook", name, kCommHooks, comm::comm_hook_name)));
      }, py::arg("hook"), "'allreduce' (average), 'fp16' (compressed) or 'noop'.")
      .def("bucket_parameter_names", [](const Ddp& d) { return d.ddp->bucket_parameter_names(); })
      .def("__getattr__", [](const Ddp& d, const std::string& name) { return d.module.attr(name.c_str()); });
}

}  // namespace

void bind_distributed(py::module_& m) {
  bind_group(m);
  bind_collectives(m);
  bind_ddp(m);
}

}  // namespace ringflow::python
