// NcclProcessGroup (comm/group/nccl_process_group.h): the set-up over a Bootstrap, collectives queued
// on the group's CUDA stream, and Works that poll an event.
//
// Note [NCCL streams]: ringflow's kernels and copies all run on the legacy default stream
// of their device (Note [CUDA streams] in kernels/cuda/cuda_kernels.h). Each group creates
// its own stream, non-blocking (no implicit synchronisation with the legacy stream, so
// communication can overlap the computation queued after it). At the call, the queued base
// records an event on the legacy stream (Op::inputs_ready) after every kernel the caller
// queued so far (a backward's gradients, say). On the communication thread a collective
//  1. makes the group's stream wait for that event, so that NCCL reads the tensors only
//     after the kernels that produce them;
//  2. queues the NCCL call(s) on the group's stream;
//  3. records the `done` event on the group's stream and polls it: the Work completes when
//     it has.
// The caller queues later kernels after Work::wait has returned, so they see the results.
// The thread runs one collective at a time, so the next is queued on the stream only once
// the last is seen complete: the thread polls without sleeping, so the gap is a poll and a
// launch, microseconds, between collectives that run one after the other on the stream
// anyway. The thread is made to keep the group's device current. The Op keeps the tensors alive; an Op of
// a broken group is kept for the rest of the process (the base's rule), so no memory that
// NCCL may still touch is freed.
//
// Note [NCCL timeouts]: the communicator is nonblocking (ncclConfig_t::blocking = 0), so no
// NCCL call blocks the host: a call that returns ncclInProgress is polled with
// ncclCommGetAsyncError until it settles, or the deadline passes. Creation is polled under
// NcclProcessGroupOptions::timeout, each collective under its CollectiveOptions::timeout
// (from the moment the communication thread starts it). When the deadline passes, NCCL
// reports an asynchronous error (a peer died, a connection broke) or a CUDA call fails, the
// communicator is aborted (ncclCommAbort: the NCCL kernels still running quit) and the
// group is broken. NCCL cannot tell which rank is missing; the base asks its PeerWatch
// whether a rank's process exited and names it. The communication thread watches every
// collective, whether or not anyone waits for its Work.
#include "ringflow/comm/group/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ringflow/comm/base/backoff.h"
#include "ringflow/comm/base/process.h"
#include "ringflow/comm/group/collective_kind.h"
#include "ringflow/comm/group/device_choice.h"
#include "ringflow/comm/bootstrap/mpi_bootstrap.h"
#include "ringflow/comm/group/group_bootstrap.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/comm/group/nccl_detail.h"
#include "ringflow/framework/error.h"
#include "ringflow/framework/ops.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow::comm {

// ---------------------------------------------------------------- NCCL's vocabulary

namespace detail {

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  throw std::invalid_argument(cat("nccl: no NCCL type for dtype ", static_cast<int>(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  throw std::invalid_argument(cat("nccl: no NCCL op for reduce op ", static_cast<int>(op)));
}

const char* nccl_error_hint(ncclResult_t code) {
  switch (code) {
    case ncclSuccess: return "";
    case ncclUnhandledCudaError:
      return "A CUDA call inside NCCL failed: check that the GPU works (nvidia-smi) and that "
             "every tensor is on this rank's GPU.";
    case ncclSystemError:
      return "A system call inside NCCL failed (sockets, shared memory, ...): check the "
             "network interfaces and the size of /dev/shm; NCCL_DEBUG=WARN prints NCCL's "
             "own diagnosis.";
    case ncclInternalError:
      return "NCCL failed internally (a bug in NCCL, or memory corruption); NCCL_DEBUG=INFO "
             "prints its log.";
    case ncclInvalidArgument:
      return "NCCL rejected an argument (a buffer not on the communicator's GPU, a dtype or "
             "op it does not support).";
    case ncclInvalidUsage:
      return "NCCL was used in a way it forbids, most often two ranks of one communicator on "
             "the same GPU (\"Duplicate GPU detected\"): give every rank its own GPU (with a "
             "single GPU only world size 1 runs), or use MpiProcessGroup, whose ranks may "
             "share a GPU.";
    case ncclRemoteError:
      return "A remote rank failed or the connection to it broke: see the other ranks' "
             "errors.";
    case ncclInProgress:
      return "The operation had not finished (nonblocking communicator).";
    default: return "Unknown NCCL result code.";
  }
}

std::string nccl_error_message(const std::string& call, ncclResult_t code,
                               const char* last_error) {
  std::string s = cat(call, " failed: ", ncclGetErrorString(code), " (NCCL error ",
                      static_cast<int>(code), ")");
  if (last_error != nullptr && last_error[0] != '\0') s += cat("; NCCL says: ", last_error);
  return cat(s, ". ", nccl_error_hint(code));
}

}  // namespace detail

namespace {

using Clock = std::chrono::steady_clock;
using detail::nccl_error_message;

void check_cuda(cudaError_t status, const char* call, const char* file, int line,
                const std::string& where) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a non-sticky error
  throw CommError(cat(file, ":", line, ": ", where, ": ", call, " failed: ",
                      cudaGetErrorString(status), " (CUDA error ", static_cast<int>(status),
                      ")"));
}

// Throws CommError naming file:line, the call, CUDA's message and `where` (rank, device).
#define RF_NCCL_CUDA(call, where) check_cuda((call), #call, __FILE__, __LINE__, (where))

// Makes `device` current for its lifetime and restores the caller's device after, unless
// keep() was called.
class CurrentDevice {
 public:
  CurrentDevice(int device, const std::string& where) {
    RF_NCCL_CUDA(cudaGetDevice(&previous_), where);
    if (previous_ != device) {
      RF_NCCL_CUDA(cudaSetDevice(device), where);
      changed_ = true;
    }
  }
  ~CurrentDevice() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  void keep() { changed_ = false; }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// After a call on the nonblocking communicator: polls ncclCommGetAsyncError while the
// result is ncclInProgress. Returns ncclSuccess, an error, or ncclInProgress when the
// deadline passed first.
ncclResult_t settle(ncclComm_t comm, ncclResult_t result, Clock::time_point deadline) {
  Backoff backoff(200);  // a short call completes within microseconds
  while (result == ncclInProgress) {
    if (Clock::now() >= deadline) return ncclInProgress;
    backoff.pause();
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    result = query != ncclSuccess ? query : state;
  }
  return result;
}

using Kind = CollectiveKind;

size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

}  // namespace

// ---------------------------------------------------------------- CUDA and NCCL handles

struct NcclProcessGroup::Cuda {
  ncclComm_t comm = nullptr;     // null once aborted or destroyed
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;    // recorded after each collective's NCCL call
  std::string where;             // "rank 2 (cuda:1)"
  Timeout timeout = kDefaultTimeout;  // the set-up's, also for finalising

  ~Cuda() {
    if (done != nullptr) (void)cudaEventDestroy(done);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);  // freed when idle
    (void)cudaGetLastError();
  }

  // NCCL's asynchronous error (ncclSuccess when there is none), with its message.
  ncclResult_t async_error(std::string* message) const {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    const ncclResult_t r = query != ncclSuccess ? query : state;
    if (r != ncclSuccess && r != ncclInProgress) {
      *message = nccl_error_message("NCCL (an asynchronous error of the communicator)", r,
                                    ncclGetLastError(comm));
    }
    return r;
  }

  // NCCL's kernels still running quit.
  void abort() {
    if (comm == nullptr) return;
    const ncclResult_t r = ncclCommAbort(comm);
    comm = nullptr;
    if (r != ncclSuccess) {
      std::fprintf(stderr, "ringflow: %s: ncclCommAbort failed: %s\n", where.c_str(),
                   ncclGetErrorString(r));
    }
  }
};

// ---------------------------------------------------------------- running a collective

void NcclProcessGroup::run_on_stream(Op& op, const char* call, const Enqueue& enqueue) {
  Cuda& c = *cuda_;
  try {
    issue_and_wait(op, call, enqueue);
  } catch (const std::exception& e) {
    // The other ranks may be inside the collective: NCCL's kernels must quit, not wait.
    c.abort();
    throw CommError(cat(op.work->description(), " failed on ", c.where, ": ", e.what()));
  }
  // As for an in-place kernel: the version changes once the write is done.
  for (const CollectiveArg& a : op.args) {
    if (a.out && a.tensor.defined()) a.tensor.storage()->bump_version();
  }
}

void NcclProcessGroup::issue_and_wait(Op& op, const char* call, const Enqueue& enqueue) {
  Cuda& c = *cuda_;
  // This thread's device from now on: switching back after each collective would make
  // device 0 current here, and CUDA gives every rank a context on it.
  CurrentDevice(device_, c.where).keep();
  if (op.inputs_ready.recorded()) {
    RF_NCCL_CUDA(cudaStreamWaitEvent(c.stream, static_cast<cudaEvent_t>(op.inputs_ready.handle()), 0),
                 c.where);
  }
  const ncclResult_t settled =
      settle(c.comm, static_cast<ncclResult_t>(enqueue(c.comm, c.stream)), op.deadline);
  if (settled == ncclInProgress) {
    throw CommError(cat(call, " was still being queued after ", op.timeout.count(),
                        " ms (the collective's timeout)"));
  }
  if (settled != ncclSuccess) {
    throw CommError(nccl_error_message(call, settled, ncclGetLastError(c.comm)));
  }
  RF_NCCL_CUDA(cudaEventRecord(c.done, c.stream), c.where);
  op.work->set_status(cat("running on the NCCL stream of cuda:", device_));
  // Spins, then yields, whether or not anyone waits (unlike the host groups, whose polling
  // takes the cores the computation needs): the next collective reaches the stream only
  // once this one is seen complete, and sleeping would leave the stream idle meanwhile.
  Backoff backoff(200);
  auto last_look = Clock::now();
  for (;;) {
    const cudaError_t query = cudaEventQuery(c.done);
    if (query == cudaSuccess) return;
    if (query != cudaErrorNotReady) {
      (void)cudaGetLastError();
      throw CommError(cat("cudaEventQuery: ", cudaGetErrorString(query), " (CUDA error ",
                          static_cast<int>(query), ")"));
    }
    std::string message;
    const ncclResult_t async = c.async_error(&message);
    if (async != ncclSuccess && async != ncclInProgress) throw CommError(message);
    if (Clock::now() >= op.deadline) {
      throw CommError(cat(
          "did not complete within ", op.timeout.count(), " ms; the NCCL communicator was "
          "aborted. A rank did not reach this collective or stopped inside it (NCCL cannot "
          "tell which); every rank must issue the same collectives in the same order"));
    }
    if (Clock::now() - last_look >= kLivenessPeriod) {
      last_look = Clock::now();
      const std::string dead = dead_peers();
      if (!dead.empty()) throw CommError(cat(dead, " while this rank waited in ", call));
    }
    backoff.pause();
  }
}

std::shared_ptr<Work> NcclProcessGroup::enqueue_nccl(Fingerprint fp, const CollectiveOptions& o,
                                                     const char* call,
                                                     std::vector<CollectiveArg> args,
                                                     Enqueue enqueue,
                                                     std::optional<Traffic> traffic) {
  fp.algorithm = static_cast<int32_t>(Algorithm::native);
  return enqueue_collective(fp, o, std::move(args),
                            [this, call, traffic, enqueue = std::move(enqueue)](Op& op) {
                              run_on_stream(op, call, enqueue);
                              if (traffic) op.work->set_traffic(*traffic);
                            });
}

std::vector<QueuedProcessGroup::Fingerprint> NcclProcessGroup::exchange_fingerprints(Op&) {
  throw std::logic_error("NcclProcessGroup has no checking mode");
}

// ---------------------------------------------------------------- the bootstrap

namespace {

MpiBootstrap mpi_bootstrap(MPI_Comm parent) {
  ensure_mpi_initialized();
  return MpiBootstrap(parent);
}

// A temporary bootstrap, alive until the delegated constructor returns.
Bootstrap& lvalue(Bootstrap&& b) { return b; }

}  // namespace

NcclProcessGroup::NcclProcessGroup(MPI_Comm parent, NcclProcessGroupOptions options)
    : NcclProcessGroup(lvalue(mpi_bootstrap(parent)), options) {}

NcclProcessGroup::NcclProcessGroup(Bootstrap& bootstrap, NcclProcessGroupOptions options)
    : QueuedProcessGroup(bootstrap.rank(), bootstrap.size(), /*checking=*/false,
                         /*stage_cuda=*/false) {
  watch_peers(std::make_unique<PeerWatch>(bootstrap, "", options.timeout));
  init(bootstrap, options);
  start();
}

NcclProcessGroup::NcclProcessGroup(ProcessGroup& group, NcclProcessGroupOptions options)
    : NcclProcessGroup(lvalue(GroupBootstrap(group, options.timeout)), options) {}

// Every rank takes the same branches: each failure found before the communicator exists is
// first made known to every rank (the exchanges below), so that they all throw instead of
// some waiting for the others until the timeout.
void NcclProcessGroup::init(Bootstrap& boot, const NcclProcessGroupOptions& options) {
  RF_CHECK(options.timeout.count() > 0, "NcclProcessGroup: timeout must be positive, got ",
           options.timeout.count(), " ms");
  RF_CHECK(options.device >= -1, "NcclProcessGroup: device must be a CUDA device index or -1 "
           "(the local rank modulo the device count), got ", options.device);
  auto c = std::make_unique<Cuda>();  // frees the stream and event if set-up fails
  c->timeout = options.timeout;
  const int me = boot.rank();
  const std::string who = cat("NcclProcessGroup on rank ", me);

  // 1. Host names -> local rank -> device; then every rank's device (or why it has none).
  const std::vector<std::string> hosts = boot.allgather(host_name());
  const int local_rank = local_rank_among(hosts, me);
  const int local_size = local_size_among(hosts, me);
  std::string why;
  const int count = cuda_device_count(&why);
  std::string mine;  // "ok <host>/<PCI bus id>" or "error <reason>"
  int device = -1;
  std::optional<CurrentDevice> on;  // this rank's device from here on (kept on success)
  Tensor barrier_buffer;
  if (count == 0) {
    mine = cat("error no CUDA device: ", why);
  } else if (options.device >= count) {
    mine = cat("error NcclProcessGroupOptions::device is ", options.device, " but host ",
               hosts[me], " has ", count, " CUDA device(s)");
  } else {
    device = options.device >= 0 ? options.device : device_for_local_rank(local_rank, count);
    char bus_id[64] = {};
    const cudaError_t e = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      mine = cat("error cudaDeviceGetPCIBusId(cuda:", device, ") failed: ", cudaGetErrorString(e));
    } else {
      mine = cat("ok ", hosts[me], "/", bus_id);
      try {
        c->where = cat("rank ", me, " (cuda:", device, ")");
        on.emplace(device, c->where);
        barrier_buffer = zeros({1}, DType::f32, Device::cuda(device));  // on the current device
        RF_NCCL_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), c->where);
        RF_NCCL_CUDA(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming), c->where);
      } catch (const std::exception& x) {
        mine = cat("error cuda:", device, " is not usable: ", x.what());
      }
    }
  }
  const std::vector<std::string> all = boot.allgather(mine);
  std::vector<std::string> gpus(all.size());
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].rfind("error ", 0) == 0) {
      throw CommError(cat(who, ": rank ", r, " (host ", hosts[r], ") cannot take part: ",
                          all[r].substr(6)));
    }
    gpus[r] = all[r].substr(3);
  }
  const std::string shared = shared_devices(gpus);
  if (!shared.empty()) {
    throw CommError(cat(
        who, ": ", shared, ". NCCL needs one GPU per rank (it fails with \"Duplicate GPU "
        "detected\"); host ", hosts[me], " runs ", local_size, " rank(s) on ", count,
        " GPU(s). Start at most one rank per GPU (with a single GPU only world size 1 runs), "
        "set NcclProcessGroupOptions::device, or use MpiProcessGroup, whose ranks may share "
        "a GPU (CUDA tensors are staged through host memory)."));
  }

  // 2. Rank 0's unique id ("ok <bytes>"), or why it could not make one ("error <text>"),
  // so that every rank hears why.
  std::string id_blob;
  if (me == 0) {
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    id_blob = r == ncclSuccess
                  ? "ok " + std::string(reinterpret_cast<const char*>(&id), sizeof id)
                  : "error " + nccl_error_message("ncclGetUniqueId", r, ncclGetLastError(nullptr));
  }
  id_blob = boot.broadcast(id_blob, 0);
  if (id_blob.rfind("ok ", 0) != 0 || id_blob.size() != 3 + sizeof(ncclUniqueId)) {
    throw CommError(cat(who, ": rank 0 could not create the NCCL unique id: ",
                        id_blob.rfind("error ", 0) == 0 ? id_blob.substr(6) : "a malformed id"));
  }
  ncclUniqueId id;
  std::memcpy(&id, id_blob.data() + 3, sizeof id);

  // 3. The communicator, on this rank's device (current since step 1).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Note [NCCL timeouts]
  ncclComm_t comm = nullptr;
  const auto deadline = Clock::now() + options.timeout;
  ncclResult_t r = ncclCommInitRankConfig(&comm, boot.size(), id, me, &config);
  if (comm != nullptr) r = settle(comm, r, deadline);
  if (r != ncclSuccess) {
    const std::string message =
        r == ncclInProgress
            ? cat("ncclCommInitRankConfig did not complete within ", options.timeout.count(),
                  " ms: a rank did not take part, or the ranks cannot reach each other")
            : nccl_error_message("ncclCommInitRankConfig", r, ncclGetLastError(comm));
    if (comm != nullptr) (void)ncclCommAbort(comm);
    throw CommError(cat(who, " (cuda:", device, "): ", message));
  }
  c->comm = comm;
  device_ = device;
  cuda_ = std::move(c);
  on->keep();  // the constructing thread's current device is now device()
  barrier_buffer_ = std::move(barrier_buffer);
}

// The collectives still queued have run (stop): each completed or broke the group.
NcclProcessGroup::~NcclProcessGroup() {
  stop();
  Cuda& c = *cuda_;
  if (c.comm == nullptr) return;
  int previous = -1;
  const bool have_previous = cudaGetDevice(&previous) == cudaSuccess;
  (void)cudaSetDevice(device_);
  if (broken_reason().empty() &&
      settle(c.comm, ncclCommFinalize(c.comm), Clock::now() + c.timeout) == ncclSuccess) {
    const ncclResult_t r = ncclCommDestroy(c.comm);
    c.comm = nullptr;
    if (r != ncclSuccess) {
      std::fprintf(stderr, "ringflow: %s: ncclCommDestroy failed: %s\n", c.where.c_str(),
                   ncclGetErrorString(r));
    }
  }
  c.abort();  // broken, or finalising failed
  if (have_previous) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

void NcclProcessGroup::check_device(const char* what, const char* role, Device device) const {
  RF_CHECK(device == Device::cuda(device_), what, ": ", role, " tensor is on ",
           device.str(), "; this nccl process group runs on cuda:", device_,
           " (CPU tensors go over MpiProcessGroup)");
}

// ---------------------------------------------------------------- the collectives

namespace {

ncclComm_t as_comm(void* comm) { return static_cast<ncclComm_t>(comm); }
cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Grouped point to point (NCCL's own recipe for gather and scatter): the root sends or
// receives every other rank's block at block(q) and copies its own on the stream; the
// others exchange `mine` with the root.
ncclResult_t rooted_exchange(bool gather, void* rooted, const Tensor& mine, int root, int me,
                             int n, ncclComm_t comm, cudaStream_t stream) {
  const size_t m = static_cast<size_t>(mine.numel()), bytes = nbytes(mine);
  if (m == 0) return ncclSuccess;
  const ncclDataType_t type = detail::nccl_dtype(mine.dtype());
  auto block = [&](int q) { return static_cast<char*>(rooted) + static_cast<size_t>(q) * bytes; };
  if (me == root) {
    void* to = gather ? block(me) : mine.raw_data();
    const void* from = gather ? mine.raw_data() : block(me);
    if (cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess) {
      (void)cudaGetLastError();
      return ncclUnhandledCudaError;
    }
  }
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  for (int q = 0; q < n && r == ncclSuccess; ++q) {
    if (me == root && q != me) {
      r = gather ? ncclRecv(block(q), m, type, q, comm, stream)
                 : ncclSend(block(q), m, type, q, comm, stream);
    }
  }
  if (me != root && r == ncclSuccess) {
    r = gather ? ncclSend(mine.raw_data(), m, type, root, comm, stream)
               : ncclRecv(mine.raw_data(), m, type, root, comm, stream);
  }
  const ncclResult_t end = ncclGroupEnd();  // always closes the group
  return r != ncclSuccess ? r : end;
}

}  // namespace

std::shared_ptr<Work> NcclProcessGroup::do_broadcast(const Tensor& t, const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return enqueue_nccl(make_fp(Kind::broadcast, t.dtype(), t.numel(), o), o, "ncclBroadcast",
                      {{t, /*in=*/root, /*out=*/!root}}, [t, root = o.root](void* comm, void* stream) {
                        if (t.numel() == 0) return static_cast<int>(ncclSuccess);
                        return static_cast<int>(ncclBroadcast(
                            t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                            detail::nccl_dtype(t.dtype()), root, as_comm(comm), as_stream(stream)));
                      });
}

std::shared_ptr<Work> NcclProcessGroup::do_reduce(const Tensor& t, const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  // In place on the root. NCCL writes recvbuff only on the root, so the other ranks' tensors
  // stay as they were, as the contract says.
  return enqueue_nccl(make_fp(Kind::reduce, t.dtype(), t.numel(), o), o, "ncclReduce",
                      {{t, /*in=*/true, /*out=*/root}}, [t, o](void* comm, void* stream) {
                        if (t.numel() == 0) return static_cast<int>(ncclSuccess);
                        return static_cast<int>(ncclReduce(
                            t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                            detail::nccl_dtype(t.dtype()), detail::nccl_op(o.op), o.root,
                            as_comm(comm), as_stream(stream)));
                      });
}

std::shared_ptr<Work> NcclProcessGroup::do_allreduce(const Tensor& t, const CollectiveOptions& o) {
  RF_CHECK(o.algorithm == Algorithm::automatic || o.algorithm == Algorithm::native,
           "allreduce: the nccl process group runs NCCL's own allreduce (Algorithm::automatic "
           "or native), not ", algorithm_name(o.algorithm), "; our algorithms run on "
           "MpiProcessGroup, which takes CUDA tensors too (staged through host memory)");
  // Modelled as NCCL's ring (what it picks for the large messages DDP sends); not measured.
  const Traffic traffic = allreduce_traffic(Algorithm::ring, t.numel(), dtype_size(t.dtype()),
                                            size(), rank());
  return enqueue_nccl(make_fp(Kind::allreduce, t.dtype(), t.numel(), o), o, "ncclAllReduce",
                      {{t, /*in=*/true, /*out=*/true}},
                      [t, op = o.op](void* comm, void* stream) {
                        if (t.numel() == 0) return static_cast<int>(ncclSuccess);
                        return static_cast<int>(ncclAllReduce(
                            t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                            detail::nccl_dtype(t.dtype()), detail::nccl_op(op), as_comm(comm),
                            as_stream(stream)));
                      },
                      traffic);
}

std::shared_ptr<Work> NcclProcessGroup::do_allgather(const Tensor& out, const Tensor& in,
                                                     const CollectiveOptions& o) {
  return enqueue_nccl(make_fp(Kind::allgather, in.dtype(), in.numel(), o), o, "ncclAllGather",
                      {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/true, /*out=*/false}},
                      [out, in](void* comm, void* stream) {
                        if (in.numel() == 0) return static_cast<int>(ncclSuccess);
                        return static_cast<int>(ncclAllGather(
                            in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()),
                            detail::nccl_dtype(in.dtype()), as_comm(comm), as_stream(stream)));
                      });
}

std::shared_ptr<Work> NcclProcessGroup::do_reduce_scatter(const Tensor& out, const Tensor& in,
                                                          const CollectiveOptions& o) {
  return enqueue_nccl(make_fp(Kind::reduce_scatter, out.dtype(), out.numel(), o), o,
                      "ncclReduceScatter",
                      {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/true, /*out=*/false}},
                      [out, in, op = o.op](void* comm, void* stream) {
                        if (out.numel() == 0) return static_cast<int>(ncclSuccess);
                        return static_cast<int>(ncclReduceScatter(
                            in.raw_data(), out.raw_data(), static_cast<size_t>(out.numel()),
                            detail::nccl_dtype(out.dtype()), detail::nccl_op(op), as_comm(comm),
                            as_stream(stream)));
                      });
}

std::shared_ptr<Work> NcclProcessGroup::do_gather(const Tensor& out, const Tensor& in,
                                                  const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return enqueue_nccl(make_fp(Kind::gather, in.dtype(), in.numel(), o), o,
                      "ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd (gather)",
                      {{out, /*in=*/false, /*out=*/root}, {in, /*in=*/true, /*out=*/false}},
                      [out, in, root = o.root, me = rank(), n = size()](void* comm, void* stream) {
                        return static_cast<int>(rooted_exchange(
                            true, me == root ? out.raw_data() : nullptr, in, root, me, n,
                            as_comm(comm), as_stream(stream)));
                      });
}

std::shared_ptr<Work> NcclProcessGroup::do_scatter(const Tensor& out, const Tensor& in,
                                                   const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return enqueue_nccl(make_fp(Kind::scatter, out.dtype(), out.numel(), o), o,
                      "ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd (scatter)",
                      {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/root, /*out=*/false}},
                      [out, in, root = o.root, me = rank(), n = size()](void* comm, void* stream) {
                        return static_cast<int>(rooted_exchange(
                            false, me == root ? in.raw_data() : nullptr, out, root, me, n,
                            as_comm(comm), as_stream(stream)));
                      });
}

// A one-element allreduce (max of zeros: the value never changes): it completes on a rank
// once every rank has reached it.
std::shared_ptr<Work> NcclProcessGroup::do_barrier(const CollectiveOptions& o) {
  return enqueue_nccl(make_fp(Kind::barrier, DType::f32, 0, o), o, "ncclAllReduce (barrier)",
                      {{barrier_buffer_, /*in=*/true, /*out=*/false}},
                      [b = barrier_buffer_](void* comm, void* stream) {
                        return static_cast<int>(ncclAllReduce(b.raw_data(), b.raw_data(), 1,
                                                              ncclFloat32, ncclMax, as_comm(comm),
                                                              as_stream(stream)));
                      });
}

// NCCL has no tags: messages between two ranks match in issue order.
std::shared_ptr<Work> NcclProcessGroup::enqueue_nccl_p2p(const Tensor& t, bool send, int peer,
                                                         int tag, const CollectiveOptions& o) {
  auto op = std::make_shared<Op>();
  op->timeout = o.timeout;
  op->args = {{t, /*in=*/send, /*out=*/!send}};
  const Enqueue enqueue = [t, send, peer](void* comm, void* stream) {
    if (t.numel() == 0) return static_cast<int>(ncclSuccess);
    const auto n = static_cast<size_t>(t.numel());
    const ncclDataType_t type = detail::nccl_dtype(t.dtype());
    return static_cast<int>(send ? ncclSend(t.raw_data(), n, type, peer, as_comm(comm), as_stream(stream))
                                 : ncclRecv(t.raw_data(), n, type, peer, as_comm(comm), as_stream(stream)));
  };
  const char* call = send ? "ncclSend" : "ncclRecv";
  op->body = [this, call, enqueue](Op& op) { run_on_stream(op, call, enqueue); };
  return enqueue_p2p(std::move(op), [&](int64_t seq) {
    return cat(send ? "send #" : "recv #", seq, send ? " to rank " : " from rank ", peer, " (",
               dtype_name(t.dtype()), ", ", t.numel(), " elements, tag ", tag, ")");
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_send(const Tensor& t, int peer, int tag,
                                                const CollectiveOptions& o) {
  return enqueue_nccl_p2p(t, /*send=*/true, peer, tag, o);
}

std::shared_ptr<Work> NcclProcessGroup::do_recv(const Tensor& t, int peer, int tag,
                                                const CollectiveOptions& o) {
  return enqueue_nccl_p2p(t, /*send=*/false, peer, tag, o);
}

}  // namespace ringflow::comm
