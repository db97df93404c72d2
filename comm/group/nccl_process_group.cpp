// NcclProcessGroup (comm/group/nccl_process_group.h): the set-up over a Bootstrap, collectives queued
// on the group's CUDA stream, and Works that poll an event.
//
// Note [NCCL streams]: ringflow's kernels and copies all run on the legacy default stream
// of their device (Note [CUDA streams] in kernels/cuda/cuda_kernels.h). Each group creates
// its own stream, non-blocking (no implicit synchronisation with the legacy stream, so
// communication can overlap the computation queued after it). A collective
//  1. records the group's `ready` event on the legacy default stream and makes the group's
//     stream wait for it, so that NCCL reads the tensors only after every kernel the caller
//     queued before the call (a backward's gradients, say);
//  2. queues the NCCL call(s) on the group's stream;
//  3. records a fresh `done` event on the group's stream: the Work completes when it has.
// The host waits (Work::wait polls `done`), and the caller queues later kernels after the
// wait has returned, so they see the results. The tensors are kept alive by the Work; a Work
// dropped before it completed hands them to the group, which lets them go only after its
// communicator was finalised or aborted (freeing device memory that NCCL still uses would
// block in cudaFree, or worse).
//
// Note [NCCL timeouts]: the communicator is nonblocking (ncclConfig_t::blocking = 0), so no
// NCCL call blocks the host: a call that returns ncclInProgress is polled with
// ncclCommGetAsyncError until it settles, or the deadline passes. Creation is polled under
// NcclProcessGroupOptions::timeout, each collective under its CollectiveOptions::timeout
// (the deadline is the time of the call plus the timeout). Work::wait and is_completed
// poll the `done` event and ncclCommGetAsyncError: when the deadline passes, NCCL reports
// an asynchronous error (a peer died, a connection broke) or a CUDA call fails, the
// communicator is aborted (ncclCommAbort: the NCCL kernels still running quit) and the group
// is broken. NCCL cannot tell which rank is missing, so the message does not name one. After
// an abort every Work not already seen complete fails: its kernel may have quit part-way.
// No thread watches the group: a collective whose Work nobody polls is caught when a later
// Work of the group is polled past its own deadline, or when the group is destroyed.
#include "ringflow/comm/group/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ringflow/comm/base/backoff.h"
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

std::string describe(Kind kind, int64_t seq, DType dtype, int64_t count,
                     const CollectiveOptions& o) {
  return describe_collective(kind, seq, dtype, count, o.op, Algorithm::native, o.root);
}

size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

}  // namespace

// ---------------------------------------------------------------- shared state

struct NcclProcessGroup::State {
  int rank = 0, size = 1, device = 0;
  Timeout timeout = kDefaultTimeout;  // the bootstrap's, also for finalising

  std::mutex mutex;              // everything below; held while issuing and aborting
  ncclComm_t comm = nullptr;     // null once aborted or destroyed
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;   // recorded on the legacy stream by each collective
  int64_t next_seq = 0;          // collectives issued
  int64_t next_p2p = 0;          // sends and recvs issued
  Clock::time_point last_deadline{};  // the latest deadline of anything issued
  std::string broken;
  bool closed = false;           // the group was destroyed
  std::vector<Tensor> orphans;   // tensors of Works dropped before they completed

  std::string where() const { return cat("rank ", rank, " (cuda:", device, ")"); }

  std::string broken_reason() {
    std::lock_guard lock(mutex);
    return broken;
  }

  // The first reason wins. Aborts the communicator: NCCL's kernels still running quit.
  void abort_locked(const std::string& reason) {
    if (broken.empty()) broken = reason;
    if (comm == nullptr) return;
    ncclComm_t c = comm;
    comm = nullptr;
    int previous = -1;
    const bool have_previous = cudaGetDevice(&previous) == cudaSuccess;
    (void)cudaSetDevice(device);
    const ncclResult_t r = ncclCommAbort(c);
    if (have_previous) (void)cudaSetDevice(previous);
    if (r != ncclSuccess) {
      std::fprintf(stderr, "ringflow: %s: ncclCommAbort failed: %s\n", where().c_str(),
                   ncclGetErrorString(r));
    }
  }
  void abort(const std::string& reason) {
    std::lock_guard lock(mutex);
    abort_locked(reason);
  }

  // An asynchronous error of the communicator (ncclSuccess when there is none, or it is
  // gone), with NCCL's message.
  ncclResult_t async_error(std::string* message) {
    std::lock_guard lock(mutex);
    if (comm == nullptr) return ncclSuccess;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    const ncclResult_t r = query != ncclSuccess ? query : state;
    if (r != ncclSuccess && r != ncclInProgress) {
      *message = nccl_error_message("NCCL (an asynchronous error of the communicator)", r,
                                    ncclGetLastError(comm));
    }
    return r;
  }
};

// ---------------------------------------------------------------- the Work

namespace {

class NcclWork final : public Work {
 public:
  NcclWork(std::string description, std::shared_ptr<NcclProcessGroup::State> state,
           cudaEvent_t done, Clock::time_point deadline, Timeout timeout,
           std::vector<Tensor> keep)
      : Work(std::move(description)), state_(std::move(state)), done_(done),
        deadline_(deadline), timeout_(timeout), keep_(std::move(keep)) {
    set_status(cat("queued on the NCCL stream of cuda:", state_->device));
  }

  ~NcclWork() override {
    if (!Work::is_completed()) {
      std::lock_guard lock(state_->mutex);
      if (!state_->closed) {
        for (Tensor& t : keep_) state_->orphans.push_back(std::move(t));
      }
    }
    (void)cudaEventDestroy(done_);  // released by CUDA once the event has completed
  }

  void wait() override { wait_until(Clock::time_point::max(), Timeout{0}); }
  void wait(Timeout timeout) override { wait_until(Clock::now() + timeout, timeout); }
  bool is_completed() const override { return const_cast<NcclWork*>(this)->poll(); }

 private:
  void wait_until(Clock::time_point until, Timeout asked) {
    Backoff backoff(200);  // a short collective completes within microseconds
    while (!poll()) {
      if (Clock::now() >= until) {
        throw CommError(cat(description(), " did not complete within ", asked.count(),
                            " ms of wait(); still ", status()));
      }
      backoff.pause();
    }
    Work::wait();  // completed: returns at once, or rethrows the error
  }

  // One look. Finishes the Work when its event has completed, or when it failed: the
  // group is broken, a CUDA call failed, NCCL reported an error, the deadline passed.
  bool poll() {
    if (Work::is_completed()) return true;
    const std::string broken = state_->broken_reason();
    if (!broken.empty()) {
      fail(cat(description(), " on ", state_->where(), ": aborted, the process group is "
               "unusable since ", broken));
      return true;
    }
    const cudaError_t query = cudaEventQuery(done_);
    if (query == cudaSuccess) {
      finish();
      return true;
    }
    if (query != cudaErrorNotReady) {
      (void)cudaGetLastError();
      const std::string reason =
          cat(description(), " failed on ", state_->where(), ": cudaEventQuery: ",
              cudaGetErrorString(query), " (CUDA error ", static_cast<int>(query), ")");
      state_->abort(reason);
      fail(reason);
      return true;
    }
    std::string message;
    const ncclResult_t async = state_->async_error(&message);
    if (async != ncclSuccess && async != ncclInProgress) {
      const std::string reason = cat(description(), " failed on ", state_->where(), ": ",
                                     message);
      state_->abort(reason);
      fail(reason);
      return true;
    }
    if (Clock::now() >= deadline_) {
      const std::string reason = cat(
          description(), " did not complete within ", timeout_.count(), " ms on ",
          state_->where(), "; the NCCL communicator was aborted. A rank did not reach this "
          "collective or stopped inside it (NCCL cannot tell which); every rank must issue "
          "the same collectives in the same order");
      state_->abort(reason);
      fail(reason);
      return true;
    }
    return false;
  }

  void fail(const std::string& reason) { finish(std::make_exception_ptr(CommError(reason))); }

  std::shared_ptr<NcclProcessGroup::State> state_;
  cudaEvent_t done_;
  Clock::time_point deadline_;
  Timeout timeout_;
  std::vector<Tensor> keep_;  // the tensors: their memory lives while NCCL may use it
};

std::shared_ptr<Work> failed_work(const std::string& description, const std::string& reason) {
  auto work = std::make_shared<Work>(description);
  work->finish(std::make_exception_ptr(CommError(reason)));
  return work;
}

// What one collective queues on the group's stream: NCCL call(s), or nothing for empty
// tensors (every rank has the same counts, so every rank skips alike).
using Enqueue = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

// Issues a collective (see Note [NCCL streams]): the sequence number, the ordering after
// the legacy stream, the NCCL call, the `done` event. Any failure breaks the group (the
// other ranks may be inside the collective) and returns a failed Work.
std::shared_ptr<Work> issue(const std::shared_ptr<NcclProcessGroup::State>& st, bool collective,
                            const std::function<std::string(int64_t)>& describe_op,
                            const CollectiveOptions& o, const char* call,
                            std::vector<Tensor> keep, const std::vector<Tensor>& written,
                            const Enqueue& enqueue) {
  std::lock_guard lock(st->mutex);
  const int64_t seq = collective ? st->next_seq++ : st->next_p2p++;
  const std::string description = describe_op(seq);
  if (!st->broken.empty()) {
    return failed_work(description, cat(description, " on ", st->where(), ": not started, "
                                        "the process group is unusable since ", st->broken));
  }
  const auto deadline = Clock::now() + o.timeout;
  st->last_deadline = std::max(st->last_deadline, deadline);
  cudaEvent_t done = nullptr;
  try {
    CurrentDevice on(st->device, st->where());
    RF_NCCL_CUDA(cudaEventRecord(st->ready, cudaStreamLegacy), st->where());
    RF_NCCL_CUDA(cudaStreamWaitEvent(st->stream, st->ready, 0), st->where());
    const ncclResult_t r = settle(st->comm, enqueue(st->comm, st->stream), deadline);
    if (r == ncclInProgress) {
      throw CommError(cat(call, " was still being queued after ", o.timeout.count(),
                          " ms (the collective's timeout)"));
    }
    if (r != ncclSuccess) throw CommError(nccl_error_message(call, r, ncclGetLastError(st->comm)));
    RF_NCCL_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), st->where());
    RF_NCCL_CUDA(cudaEventRecord(done, st->stream), st->where());
  } catch (const std::exception& e) {
    if (done != nullptr) (void)cudaEventDestroy(done);
    const std::string reason = cat(description, " failed on ", st->where(), ": ", e.what());
    st->orphans.insert(st->orphans.end(), keep.begin(), keep.end());
    st->abort_locked(reason);
    return failed_work(description, reason);
  }
  // As for an in-place kernel: the version changes when the write is queued.
  for (const Tensor& t : written) {
    if (t.defined()) t.storage()->bump_version();
  }
  return std::make_shared<NcclWork>(description, st, done, deadline, o.timeout, std::move(keep));
}

}  // namespace

// ---------------------------------------------------------------- the bootstrap

NcclProcessGroup::NcclProcessGroup(MPI_Comm parent, NcclProcessGroupOptions options) {
  ensure_mpi_initialized();
  MpiBootstrap bootstrap(parent);
  init(bootstrap, options);
}

NcclProcessGroup::NcclProcessGroup(Bootstrap& bootstrap, NcclProcessGroupOptions options) {
  init(bootstrap, options);
}

NcclProcessGroup::NcclProcessGroup(ProcessGroup& group, NcclProcessGroupOptions options) {
  GroupBootstrap bootstrap(group, options.timeout);
  init(bootstrap, options);
}

// Every rank takes the same branches: each failure found before the communicator exists is
// first made known to every rank (the exchanges below), so that they all throw instead of
// some waiting for the others until the timeout.
void NcclProcessGroup::init(Bootstrap& boot, const NcclProcessGroupOptions& options) {
  RF_CHECK(options.timeout.count() > 0, "NcclProcessGroup: timeout must be positive, got ",
           options.timeout.count(), " ms");
  RF_CHECK(options.device >= -1, "NcclProcessGroup: device must be a CUDA device index or -1 "
           "(the local rank modulo the device count), got ", options.device);
  auto st = std::make_shared<State>();
  st->rank = boot.rank();
  st->size = boot.size();
  st->timeout = options.timeout;
  const std::string who = cat("NcclProcessGroup on rank ", st->rank);

  // 1. Host names -> local rank -> device; then every rank's device (or why it has none).
  const std::vector<std::string> hosts = boot.allgather(host_name());
  const int local_rank = local_rank_among(hosts, st->rank);
  const int local_size = local_size_among(hosts, st->rank);
  std::string why;
  const int count = cuda_device_count(&why);
  std::string mine;  // "ok <host>/<PCI bus id>" or "error <reason>"
  int device = -1;
  std::optional<CurrentDevice> on;  // this rank's device from here on (kept on success)
  Tensor barrier_buffer;
  // The stream and the ready event are the State's once the communicator exists.
  struct Release {
    State& st;
    bool keep = false;
    ~Release() {
      if (keep) return;
      if (st.ready != nullptr) (void)cudaEventDestroy(st.ready);
      if (st.stream != nullptr) (void)cudaStreamDestroy(st.stream);
    }
  } release{*st};
  if (count == 0) {
    mine = cat("error no CUDA device: ", why);
  } else if (options.device >= count) {
    mine = cat("error NcclProcessGroupOptions::device is ", options.device, " but host ",
               hosts[st->rank], " has ", count, " CUDA device(s)");
  } else {
    device = options.device >= 0 ? options.device : device_for_local_rank(local_rank, count);
    char bus_id[64] = {};
    const cudaError_t e = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id) - 1, device);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      mine = cat("error cudaDeviceGetPCIBusId(cuda:", device, ") failed: ", cudaGetErrorString(e));
    } else {
      mine = cat("ok ", hosts[st->rank], "/", bus_id);
      try {
        const std::string where = cat("rank ", st->rank, " (cuda:", device, ")");
        on.emplace(device, where);
        barrier_buffer = zeros({1}, DType::f32, Device::cuda(device));  // on the current device
        RF_NCCL_CUDA(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking), where);
        RF_NCCL_CUDA(cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming), where);
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
        "detected\"); host ", hosts[st->rank], " runs ", local_size, " rank(s) on ", count,
        " GPU(s). Start at most one rank per GPU (with a single GPU only world size 1 runs), "
        "set NcclProcessGroupOptions::device, or use MpiProcessGroup, whose ranks may share "
        "a GPU (CUDA tensors are staged through host memory)."));
  }
  st->device = device;

  // 2. Rank 0's unique id ("ok <bytes>"), or why it could not make one ("error <text>"),
  // so that every rank hears why.
  std::string id_blob;
  if (st->rank == 0) {
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
  ncclResult_t r = ncclCommInitRankConfig(&comm, st->size, id, st->rank, &config);
  if (comm != nullptr) r = settle(comm, r, deadline);
  if (r != ncclSuccess) {
    const std::string message =
        r == ncclInProgress
            ? cat("ncclCommInitRankConfig did not complete within ", options.timeout.count(),
                  " ms: a rank did not take part, or the ranks cannot reach each other")
            : nccl_error_message("ncclCommInitRankConfig", r, ncclGetLastError(comm));
    if (comm != nullptr) (void)ncclCommAbort(comm);
    throw CommError(cat(who, " (cuda:", st->device, "): ", message));
  }
  st->comm = comm;
  release.keep = true;
  state_ = std::move(st);
  on->keep();  // the constructing thread's current device is now device()
  barrier_buffer_ = std::move(barrier_buffer);
}

NcclProcessGroup::~NcclProcessGroup() {
  State& st = *state_;
  std::unique_lock lock(st.mutex);
  if (st.comm != nullptr) {
    // Let the collectives still queued finish, up to the latest deadline, then finalise
    // (nonblocking: polled under the group's timeout) and destroy; abort otherwise.
    Backoff backoff(200);
    bool quiet = false;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(st.stream);
      if (q == cudaSuccess) {
        quiet = true;
        break;
      }
      ncclResult_t state = ncclSuccess;
      if (q != cudaErrorNotReady || ncclCommGetAsyncError(st.comm, &state) != ncclSuccess ||
          (state != ncclSuccess && state != ncclInProgress) || Clock::now() >= st.last_deadline) {
        (void)cudaGetLastError();
        break;
      }
      lock.unlock();  // let Works poll meanwhile
      backoff.pause();
      lock.lock();
      if (st.comm == nullptr) break;  // a Work aborted it
    }
    if (st.comm != nullptr && quiet &&
        settle(st.comm, ncclCommFinalize(st.comm), Clock::now() + st.timeout) == ncclSuccess) {
      const ncclResult_t r = ncclCommDestroy(st.comm);
      st.comm = nullptr;
      if (r != ncclSuccess) {
        std::fprintf(stderr, "ringflow: %s: ncclCommDestroy failed: %s\n", st.where().c_str(),
                     ncclGetErrorString(r));
      }
    }
    if (st.comm != nullptr) {
      st.abort_locked(cat("the process group on ", st.where(), " was destroyed while a "
                          "collective had not completed"));
    }
  }
  st.closed = true;
  if (st.ready != nullptr) (void)cudaEventDestroy(st.ready);
  if (st.stream != nullptr) (void)cudaStreamDestroy(st.stream);  // freed when idle
  st.orphans.clear();
  (void)cudaGetLastError();
}

int NcclProcessGroup::rank() const { return state_->rank; }
int NcclProcessGroup::size() const { return state_->size; }
int NcclProcessGroup::device() const { return state_->device; }
std::string NcclProcessGroup::broken_reason() const { return state_->broken_reason(); }

void NcclProcessGroup::check_device(const char* what, const char* role, Device device) const {
  RF_CHECK(device == Device::cuda(state_->device), what, ": ", role, " tensor is on ",
           device.str(), "; this nccl process group runs on cuda:", state_->device,
           " (CPU tensors go over MpiProcessGroup)");
}

// ---------------------------------------------------------------- the collectives

std::shared_ptr<Work> NcclProcessGroup::do_broadcast(const Tensor& t, const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return issue(
      state_, true, [&](int64_t seq) { return describe(Kind::broadcast, seq, t.dtype(), t.numel(), o); },
      o, "ncclBroadcast", {t}, root ? std::vector<Tensor>{} : std::vector<Tensor>{t},
      [t, root = o.root](ncclComm_t comm, cudaStream_t stream) {
        if (t.numel() == 0) return ncclSuccess;
        return ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                             detail::nccl_dtype(t.dtype()), root, comm, stream);
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_reduce(const Tensor& t, const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  // In place on the root. NCCL writes recvbuff only on the root, so the other ranks' tensors
  // stay as they were, as the contract says.
  return issue(
      state_, true, [&](int64_t seq) { return describe(Kind::reduce, seq, t.dtype(), t.numel(), o); },
      o, "ncclReduce", {t}, root ? std::vector<Tensor>{t} : std::vector<Tensor>{},
      [t, o](ncclComm_t comm, cudaStream_t stream) {
        if (t.numel() == 0) return ncclSuccess;
        return ncclReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                          detail::nccl_dtype(t.dtype()), detail::nccl_op(o.op), o.root, comm,
                          stream);
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_allreduce(const Tensor& t, const CollectiveOptions& o) {
  RF_CHECK(o.algorithm == Algorithm::automatic || o.algorithm == Algorithm::native,
           "allreduce: the nccl process group runs NCCL's own allreduce (Algorithm::automatic "
           "or native), not ", algorithm_name(o.algorithm), "; our algorithms run on "
           "MpiProcessGroup, which takes CUDA tensors too (staged through host memory)");
  auto work = issue(
      state_, true, [&](int64_t seq) { return describe(Kind::allreduce, seq, t.dtype(), t.numel(), o); },
      o, "ncclAllReduce", {t}, {t}, [t, op = o.op](ncclComm_t comm, cudaStream_t stream) {
        if (t.numel() == 0) return ncclSuccess;
        return ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                             detail::nccl_dtype(t.dtype()), detail::nccl_op(op), comm, stream);
      });
  // Modelled as NCCL's ring (what it picks for the large messages DDP sends); not measured.
  work->set_traffic(allreduce_traffic(Algorithm::ring, t.numel(), dtype_size(t.dtype()),
                                      state_->size, state_->rank));
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::do_allgather(const Tensor& out, const Tensor& in,
                                                     const CollectiveOptions& o) {
  return issue(
      state_, true, [&](int64_t seq) { return describe(Kind::allgather, seq, in.dtype(), in.numel(), o); },
      o, "ncclAllGather", {out, in}, {out}, [out, in](ncclComm_t comm, cudaStream_t stream) {
        if (in.numel() == 0) return ncclSuccess;
        return ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()),
                             detail::nccl_dtype(in.dtype()), comm, stream);
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_reduce_scatter(const Tensor& out, const Tensor& in,
                                                          const CollectiveOptions& o) {
  return issue(
      state_, true,
      [&](int64_t seq) { return describe(Kind::reduce_scatter, seq, out.dtype(), out.numel(), o); },
      o, "ncclReduceScatter", {out, in}, {out},
      [out, in, op = o.op](ncclComm_t comm, cudaStream_t stream) {
        if (out.numel() == 0) return ncclSuccess;
        return ncclReduceScatter(in.raw_data(), out.raw_data(), static_cast<size_t>(out.numel()),
                                 detail::nccl_dtype(out.dtype()), detail::nccl_op(op), comm,
                                 stream);
      });
}

// Grouped point to point (NCCL's own recipe for gather): the root receives every other
// rank's block and copies its own on the stream.
std::shared_ptr<Work> NcclProcessGroup::do_gather(const Tensor& out, const Tensor& in,
                                                  const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return issue(
      state_, true, [&](int64_t seq) { return describe(Kind::gather, seq, in.dtype(), in.numel(), o); },
      o, "ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd (gather)", {out, in},
      root ? std::vector<Tensor>{out} : std::vector<Tensor>{},
      [out, in, root, o, me = rank(), n = size()](ncclComm_t comm, cudaStream_t stream) {
        const size_t m = static_cast<size_t>(in.numel());
        if (m == 0) return ncclSuccess;
        const ncclDataType_t type = detail::nccl_dtype(in.dtype());
        if (root && cudaMemcpyAsync(static_cast<char*>(out.raw_data()) + me * nbytes(in),
                                    in.raw_data(), nbytes(in), cudaMemcpyDeviceToDevice,
                                    stream) != cudaSuccess) {
          (void)cudaGetLastError();
          return ncclUnhandledCudaError;
        }
        ncclResult_t r = ncclGroupStart();
        if (r != ncclSuccess) return r;
        if (root) {
          for (int q = 0; q < n && r == ncclSuccess; ++q) {
            if (q == me) continue;
            r = ncclRecv(static_cast<char*>(out.raw_data()) + q * nbytes(in), m, type, q, comm,
                         stream);
          }
        } else {
          r = ncclSend(in.raw_data(), m, type, o.root, comm, stream);
        }
        const ncclResult_t end = ncclGroupEnd();  // always closes the group
        return r != ncclSuccess ? r : end;
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_scatter(const Tensor& out, const Tensor& in,
                                                   const CollectiveOptions& o) {
  const bool root = rank() == o.root;
  return issue(
      state_, true, [&](int64_t seq) { return describe(Kind::scatter, seq, out.dtype(), out.numel(), o); },
      o, "ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd (scatter)", {out, in}, {out},
      [out, in, root, o, me = rank(), n = size()](ncclComm_t comm, cudaStream_t stream) {
        const size_t m = static_cast<size_t>(out.numel());
        if (m == 0) return ncclSuccess;
        const ncclDataType_t type = detail::nccl_dtype(out.dtype());
        if (root && cudaMemcpyAsync(out.raw_data(),
                                    static_cast<const char*>(in.raw_data()) + me * nbytes(out),
                                    nbytes(out), cudaMemcpyDeviceToDevice, stream) != cudaSuccess) {
          (void)cudaGetLastError();
          return ncclUnhandledCudaError;
        }
        ncclResult_t r = ncclGroupStart();
        if (r != ncclSuccess) return r;
        if (root) {
          for (int q = 0; q < n && r == ncclSuccess; ++q) {
            if (q == me) continue;
            r = ncclSend(static_cast<const char*>(in.raw_data()) + q * nbytes(out), m, type, q,
                         comm, stream);
          }
        } else {
          r = ncclRecv(out.raw_data(), m, type, o.root, comm, stream);
        }
        const ncclResult_t end = ncclGroupEnd();
        return r != ncclSuccess ? r : end;
      });
}

// A one-element allreduce (max of zeros: the value never changes): it completes on a rank
// once every rank has reached it.
std::shared_ptr<Work> NcclProcessGroup::do_barrier(const CollectiveOptions& o) {
  return issue(
      state_, true, [&](int64_t seq) { return describe(Kind::barrier, seq, DType::f32, 0, o); }, o,
      "ncclAllReduce (barrier)", {barrier_buffer_}, {},
      [b = barrier_buffer_](ncclComm_t comm, cudaStream_t stream) {
        return ncclAllReduce(b.raw_data(), b.raw_data(), 1, ncclFloat32, ncclMax, comm, stream);
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_send(const Tensor& t, int peer, int tag,
                                                const CollectiveOptions& o) {
  return issue(
      state_, false,
      [&](int64_t seq) {
        return cat("send #", seq, " to rank ", peer, " (", dtype_name(t.dtype()), ", ",
                   t.numel(), " elements, tag ", tag, ")");
      },
      o, "ncclSend", {t}, {}, [t, peer](ncclComm_t comm, cudaStream_t stream) {
        if (t.numel() == 0) return ncclSuccess;
        return ncclSend(t.raw_data(), static_cast<size_t>(t.numel()),
                        detail::nccl_dtype(t.dtype()), peer, comm, stream);
      });
}

std::shared_ptr<Work> NcclProcessGroup::do_recv(const Tensor& t, int peer, int tag,
                                                const CollectiveOptions& o) {
  return issue(
      state_, false,
      [&](int64_t seq) {
        return cat("recv #", seq, " from rank ", peer, " (", dtype_name(t.dtype()), ", ",
                   t.numel(), " elements, tag ", tag, ")");
      },
      o, "ncclRecv", {t}, {t}, [t, peer](ncclComm_t comm, cudaStream_t stream) {
        if (t.numel() == 0) return ncclSuccess;
        return ncclRecv(t.raw_data(), static_cast<size_t>(t.numel()),
                        detail::nccl_dtype(t.dtype()), peer, comm, stream);
      });
}

}  // namespace ringflow::comm
