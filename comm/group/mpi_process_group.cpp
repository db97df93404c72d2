// Note [MPI lifecycle]: MPI can be initialised and finalised once per process. The first
// MpiProcessGroup (or ensure_mpi_initialized) initialises it with MPI_THREAD_MULTIPLE when
// the program has not; a function-local static then finalises it at exit, after the
// destructors of statics created later (so a static group is destroyed first). When the
// program initialised MPI itself, it finalises it too, and a group only checks that the
// thread level is MPI_THREAD_MULTIPLE: the communication thread calls MPI while the
// caller's threads may as well.
// After a failure MPI_Finalize would wait for ever for a rank that died or stopped (MPICH
// finalises in a PMI barrier: measured under bench/cluster, and on one node with a rank
// stopped by SIGSTOP). So when a group broke, or saw a rank's process exit, MPI is not
// finalised: a group that initialised MPI instead ends the job with MPI_Abort at exit, so
// that the launcher stops every rank on every node, the stalled one too (an exit without
// MPI_Finalize ends only this node's ranks). Before that, the broken group's destructor
// says goodbye and waits for the other ranks' goodbyes (PeerWatch::wait_for_goodbyes),
// so that the abort does not kill a rank that is still reporting.
//
// Note [timeouts]: the communication thread never blocks in MPI. MPI's collectives are
// started non-blocking (MPI_Iallreduce, MPI_Ibcast, ...) and polled with MPI_Testsome
// until they complete or options.timeout passes (pausing between polls as comm/base/backoff.h
// says, so that the comm thread leaves the cores to the computation it overlaps with).
// At the deadline the Work fails with a CommError naming the collective, its sequence
// number and what did not arrive. A collective request cannot be cancelled in MPI, and the
// other ranks may be part-way through it, so the group is then broken: its later
// collectives fail at once, and neither the abandoned requests nor (at destruction) its
// communicators are freed, so that no late message can match a later communicator that
// reuses the context id. Make a new group to go on. In checking mode the fingerprint
// exchange is point to point, so the ranks whose fingerprint did not arrive are exactly
// the ranks that did not arrive at the collective: they are named. Without checking mode the
// base asks the group's PeerWatch where the others are (Note [liveness links]).
// Our own allreduce algorithms run through the group's ShmTransport when every rank is on
// this node, else its TcpTransport, else an MpiTransport, given the same deadline: each
// names the peer it waited for in vain. Shared memory and TCP leave nothing pending: a
// late peer writes only into the shared segments or the socket buffers, never into the
// tensors.
// Memory: MPI may still write into the buffers of a timed-out collective if a late rank
// turns up, so the collective that broke the group is kept alive (its tensors with it)
// for the rest of the process, deliberately leaked. (The algorithms' per-thread scratch
// buffer is freed with the comm thread: a peer arriving after that is not covered.)
//
// Communicators get MPI_ERRORS_RETURN, so an MPI failure (a dead peer, where the library
// detects it) is thrown as a CommError naming the call and this rank, not an abort.
//
// Note [a rank that dies]: measured with MPICH 4.0.2 (Hydra, ch4:ucx), see
// tests/comm_failure_test.cpp, tests/dead_rank_test.py and docs/failures.md. Hydra kills
// a node's ranks when one dies or exits without MPI_Finalize; train's ranks outlive that
// under a supervisor (comm/bootstrap/rank_supervisor.h). MPI reports no error for the dead peer (on
// one node, nor across nodes over TCP), so the group asks its PeerWatch every
// kLivenessPeriod while it polls: a rank of this node whose process is gone, or of another
// node whose liveness link closed, fails the collective naming it (Note [liveness links]
// in peer_watch.cpp), and MPI is then not finalised (its finalize waits for the dead). A
// rank that calls MPI_Finalize and returns early is the same as one that skips the
// collective: the others fail at the timeout, naming it in checking mode.
//
// CUDA tensors: staged by the queued base (Note [CUDA tensors over host groups] in
// cuda_staging.cpp).
#include "ringflow/comm/group/mpi_process_group.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/algorithms/collectives.h"
#include "ringflow/comm/base/backoff.h"
#include "ringflow/comm/base/process.h"
#include "ringflow/comm/group/collective_kind.h"
#include "ringflow/comm/transport/counting_transport.h"
#include "ringflow/comm/base/mpi_error.h"
#include "ringflow/comm/bootstrap/mpi_bootstrap.h"
#include "ringflow/comm/transport/mpi_transport.h"
#include "ringflow/comm/transport/open_transport.h"
#include "ringflow/framework/error.h"
#include "ringflow/kernels/cuda_copy.h"
#include "ringflow/kernels/cuda_devices.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

using Kind = CollectiveKind;

int world_rank() {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

#define RF_CHECK_MPI(call)                                                               \
  do {                                                                                   \
    int rf_code_ = (call);                                                               \
    if (rf_code_ != MPI_SUCCESS) {                                                       \
      throw CommError(::ringflow::cat(__FILE__, ":", __LINE__, ": ", #call,              \
                                      " failed on rank ", world_rank(), ": ",            \
                                      detail::mpi_error_text(rf_code_)));                \
    }                                                                                    \
  } while (0)

// The MPI datatype that moves (not reduces) elements of dtype.
MPI_Datatype transfer_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

bool is_16bit(DType d) { return d == DType::f16 || d == DType::bf16; }

// f16/bf16 <-> f32 for MPI reductions: MPICH 4.0 has no 16-bit float type to reduce, so
// the data is widened to f32, reduced by MPI in f32 and rounded back once (see reduce()).
std::vector<float> widen(Buffer b) {
  std::vector<float> out(static_cast<size_t>(b.count));
  const auto* bits = static_cast<const uint16_t*>(b.data);
  const bool half = b.dtype == DType::f16;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = half ? half_bits_to_float(bits[i]) : bf16_bits_to_float(bits[i]);
  }
  return out;
}

void narrow_into(Buffer b, const std::vector<float>& values) {
  auto* bits = static_cast<uint16_t*>(b.data);
  const bool half = b.dtype == DType::f16;
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = half ? float_to_half_bits(values[i]) : float_to_bf16_bits(values[i]);
  }
}

void check_count(const char* what, int64_t count) {
  RF_CHECK(count <= INT_MAX, what, ": ", count, " elements exceed MPI's int count (",
           INT_MAX, "); split the tensor");
}

// Bytes per element on the wire: MPI reduces f16/bf16 widened to f32 (see widen()).
int64_t wire_bytes(DType dtype, bool reduced) {
  return reduced && is_16bit(dtype) ? 4 : static_cast<int64_t>(dtype_size(dtype));
}

// MPI's own collectives move what MPI's algorithm chooses; these are the models of
// comm/base/traffic.h (m: elements per block).
Traffic ring_block_traffic(int64_t m, int64_t esize, int n) {
  return {(n - 1) * m * esize, (n - 1) * m * esize, false};  // allgather, reduce_scatter
}

}  // namespace

// ---------------------------------------------------------------- MPI's lifecycle

namespace {

// How long a failed job waits, at exit, before MPI_Abort.
constexpr std::chrono::milliseconds kAbortGrace{500};

struct MpiEnv {
  bool owned = false;       // initialised here: finalised (or aborted) here
  bool job_failed = false;  // a group broke or saw a rank exit (Note [MPI lifecycle])
  MpiEnv() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        throw CommError("MPI_Init_thread failed");
      }
      owned = true;
      if (provided < MPI_THREAD_MULTIPLE) {
        throw CommError(cat("MPI provides thread level ", provided,
                            ", below MPI_THREAD_MULTIPLE, which the process group needs"));
      }
      return;
    }
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) {
      throw CommError(cat("MPI was initialised with thread level ", provided,
                          "; the process group's communication thread needs "
                          "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)"));
    }
  }
  ~MpiEnv() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!owned || finalized) return;
    if (job_failed) {
      // MPI_Abort has the launcher end every rank at once, and MPICH's mpiexec can drop what
      // the ranks wrote just before that it had not passed on yet: their error messages (1 of
      // 12 runs of a stalled rank under load said nothing). A moment first lets it pass them on.
      std::fflush(nullptr);
      std::this_thread::sleep_for(kAbortGrace);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }
};

MpiEnv& mpi_env() {
  static MpiEnv env;
  return env;
}

}  // namespace

void ensure_mpi_initialized() { mpi_env(); }

void abort_mpi_at_exit() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) mpi_env().job_failed = true;
}

bool comm_check_requested_by_env() {
  const char* v = std::getenv("RINGFLOW_COMM_CHECK");
  return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

// ---------------------------------------------------------------- the group

namespace {

// The rank and size in `parent`, MPI initialised first (for the base's constructor).
std::pair<int, int> rank_and_size(MPI_Comm parent) {
  ensure_mpi_initialized();
  RF_CHECK(parent != MPI_COMM_NULL, "MpiProcessGroup: null parent communicator");
  int rank = 0, size = 1;
  RF_CHECK_MPI(MPI_Comm_rank(parent, &rank));
  RF_CHECK_MPI(MPI_Comm_size(parent, &size));
  return {rank, size};
}

}  // namespace

MpiProcessGroup::MpiProcessGroup(MPI_Comm parent, MpiProcessGroupOptions options)
    : QueuedProcessGroup(rank_and_size(parent).first, rank_and_size(parent).second,
                         options.checking),
      options_(options) {
  for (MPI_Comm* c : {&comm_, &algo_comm_, &check_comm_}) {
    RF_CHECK_MPI(MPI_Comm_dup(parent, c));
    RF_CHECK_MPI(MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN));
  }
  MpiBootstrap bootstrap(algo_comm_);
  set_hosts(host_indices(bootstrap.allgather(node_identity())));
  if (options_.shared_memory || options_.sockets) {
    OpenedTransport opened = open_transport(
        bootstrap, host_of(), {.kind = !options_.sockets        ? TransportKind::shm
                            : !options_.shared_memory ? TransportKind::tcp
                                                      : TransportKind::automatic,
                    .shm = {},
                    .tcp = {.interface = options_.socket_interface}});
    transport_ = std::move(opened.transport);
    transport_name_ = transport_ ? transport_kind_name(opened.kind) : "mpi";
    if (transport_) transport_kind_ = opened.kind;
    if (transport_) transport_->set_waiters(waiters());
    if (options_.sockets) why_not_tcp_ = opened.why_not;
  }
  watch_peers(std::make_unique<PeerWatch>(bootstrap, options_.socket_interface));
  start();
}

MpiProcessGroup::~MpiProcessGroup() {
  stop();
  if ((peer_died() || !broken_reason().empty()) && mpi_env().owned) {
    await_goodbyes();
    mpi_env().job_failed = true;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A broken group keeps its communicators (and its abandoned requests, which MPI forbids
  // freeing): messages still in flight on them must never match a later communicator's,
  // as they would if MPI gave a freed communicator's context id to a new one.
  if (!broken_reason().empty()) return;
  for (MPI_Comm* c : {&comm_, &algo_comm_, &check_comm_}) MPI_Comm_free(c);
}

void MpiProcessGroup::check_device(const char*, const char*, Device) const {
  // The CPU, or any CUDA device: staged through host memory (CudaStaging).
}

std::string MpiProcessGroup::transport_name() const { return transport_name_; }

void MpiProcessGroup::abandon(const std::vector<MPI_Request>& requests,
                              const std::vector<int>& which) {
  for (int i : which) abandoned_.push_back(requests[i]);
}

// ---------------------------------------------------------------- waiting

std::vector<int> MpiProcessGroup::poll(Op& op, std::vector<MPI_Request>& requests,
                                       const char* call, MPI_Status* out_statuses,
                                       const std::vector<int>* peers) {
  const int n = static_cast<int>(requests.size());
  std::vector<int> indices(requests.size());
  std::vector<MPI_Status> statuses(requests.size());
  int remaining = static_cast<int>(std::count_if(requests.begin(), requests.end(),
                                                 [](MPI_Request r) { return r != MPI_REQUEST_NULL; }));
  Backoff backoff(200, waiters());  // small collectives complete within microseconds
  auto last_look = Clock::now();
  for (long iter = 0; remaining > 0; ++iter) {
    int done = 0;
    const int code = MPI_Testsome(n, requests.data(), &done, indices.data(), statuses.data());
    if (code != MPI_SUCCESS) {
      int first = code;
      if (code == MPI_ERR_IN_STATUS) {
        for (int i = 0; i < done; ++i) {
          if (statuses[i].MPI_ERROR != MPI_SUCCESS) first = statuses[i].MPI_ERROR;
        }
      }
      throw CommError(cat(op.work->description(), " failed on rank ", rank(), " in ", call, ": ",
                          detail::mpi_error_text(first)));
    }
    if (done != MPI_UNDEFINED) {
      remaining -= done;
      if (out_statuses) {
        for (int i = 0; i < done; ++i) out_statuses[indices[i]] = statuses[i];
      }
    }
    if (remaining == 0) break;
    const auto now = Clock::now();
    if (now >= op.deadline) break;
    if (now - last_look >= kLivenessPeriod) {
      last_look = now;
      const std::string dead = dead_peers();
      if (!dead.empty()) {
        const std::string reason = cat(op.work->description(), " failed on rank ", rank(), ": ",
                                       dead, " while this rank waited in ", call);
        mark_broken(reason);
        std::vector<int> pending;
        for (int i = 0; i < n; ++i)
          if (requests[i] != MPI_REQUEST_NULL) pending.push_back(i);
        abandon(requests, pending);
        throw CommError(reason);
      }
    }
    const bool progress = done != MPI_UNDEFINED && done > 0;
    if (peers && (iter == 200 || (iter > 200 && progress))) {
      std::string missing;
      for (int i = 0; i < n; ++i) {
        if (requests[i] != MPI_REQUEST_NULL) missing += cat(missing.empty() ? "" : ", ", (*peers)[i]);
      }
      op.work->set_status(cat("waiting in ", call, " for rank(s) ", missing,
                              ", not yet at this collective"));
    }
    backoff.pause();
  }
  std::vector<int> pending;
  for (int i = 0; i < n; ++i) {
    if (requests[i] != MPI_REQUEST_NULL) pending.push_back(i);
  }
  return pending;
}

void MpiProcessGroup::wait_or_timeout(Op& op, std::vector<MPI_Request>& requests,
                                      const char* call) {
  op.work->set_status(cat("waiting in ", call));
  std::vector<int> pending = poll(op, requests, call);
  if (pending.empty()) return;
  const std::string reason = cat(
      op.work->description(), " did not complete within ", op.timeout.count(), " ms on rank ",
      rank(), " (", call, " pending)",
      options_.checking ? "; every rank arrived (fingerprints received), so one stopped or "
                          "died inside the collective"
                        : "");
  mark_broken(reason);
  abandon(requests, pending);
  throw CommError(reason);
}

// Every rank sends its fingerprint to every other rank and receives theirs, point to
// point on check_comm_, so that the ones that did not arrive can be named.
std::vector<MpiProcessGroup::Fingerprint> MpiProcessGroup::exchange_fingerprints(Op& op) {
  std::vector<Fingerprint> theirs(static_cast<size_t>(size()));
  theirs[rank()] = op.fp;
  std::vector<MPI_Request> recvs, sends;
  std::vector<int> peers;
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank()) continue;
    peers.push_back(peer);
    recvs.emplace_back();
    RF_CHECK_MPI(MPI_Irecv(&theirs[peer], sizeof(Fingerprint), MPI_BYTE, peer, 0, check_comm_,
                           &recvs.back()));
    sends.emplace_back();
    RF_CHECK_MPI(MPI_Isend(&op.fp, sizeof(Fingerprint), MPI_BYTE, peer, 0, check_comm_,
                           &sends.back()));
  }
  std::vector<int> missing = poll(op, recvs, "the fingerprint exchange", nullptr, &peers);
  if (!missing.empty()) {
    std::string ranks;
    for (int i : missing) ranks += cat(ranks.empty() ? "" : ", ", peers[i]);
    const std::string reason =
        cat(op.work->description(), " timed out after ", op.timeout.count(), " ms on rank ",
            rank(), ": rank", missing.size() > 1 ? "s " : " ", ranks,
            " did not arrive (no fingerprint received)");
    mark_broken(reason);
    for (int i : missing) MPI_Cancel(&recvs[i]);
    abandon(recvs, missing);
    std::vector<int> all_sends(sends.size());
    for (size_t i = 0; i < sends.size(); ++i) all_sends[i] = static_cast<int>(i);
    abandon(sends, all_sends);
    throw CommError(reason);
  }
  // Sends of a few bytes complete at once (eager); wait for them under the same deadline.
  wait_or_timeout(op, sends, "the fingerprint exchange (sends)");
  return theirs;
}

// ---------------------------------------------------------------- the collectives

// Each body works on op.host(i), the host memory of argument i: the tensor itself on the
// CPU, its staged copy for a CUDA tensor (CudaStaging). The CollectiveArg flags say
// which arguments the collective reads (in) and writes (out) on this rank; the queued base
// stages them and bumps the version of every tensor written.

// Through our shared-memory or TCP transport where the group has one: its waits sleep until
// the bytes arrive, where MPI's request has to be polled (DDP broadcasts the BatchNorm
// buffers before every forward).
std::shared_ptr<Work> MpiProcessGroup::do_broadcast(const Tensor& t, const CollectiveOptions& o) {
  check_count("broadcast", t.numel());
  const bool root = rank() == o.root;
  return enqueue_collective(make_fp(Kind::broadcast, t.dtype(), t.numel(), o), o,
                            {{t, /*in=*/root, /*out=*/!root}}, [this, root = o.root](Op& op) {
    const Buffer b = op.host(0);
    if (transport_) {
      run_on_transport(op, "the tree broadcast", [&](Transport& tr) { broadcast_tree(tr, b, root); });
      return;
    }
    std::vector<MPI_Request> req(1);
    RF_CHECK_MPI(MPI_Ibcast(b.data, static_cast<int>(b.count), transfer_type(b.dtype), root,
                            comm_, &req[0]));
    wait_or_timeout(op, req, "MPI_Ibcast");
    op.work->set_traffic(broadcast_traffic(b.count * wire_bytes(b.dtype, false), size(), rank(),
                                           root));
  });
}

std::shared_ptr<Work> MpiProcessGroup::do_reduce(const Tensor& t, const CollectiveOptions& o) {
  check_count("reduce", t.numel());
  const bool root = rank() == o.root;
  return enqueue_collective(make_fp(Kind::reduce, t.dtype(), t.numel(), o), o,
                            {{t, /*in=*/true, /*out=*/root}}, [this, o, root](Op& op) {
    const Buffer b = op.host(0);
    const int count = static_cast<int>(b.count);
    op.work->set_traffic(reduce_traffic(b.count * wire_bytes(b.dtype, true), size(), rank(), o.root));
    std::vector<MPI_Request> req(1);
    if (is_16bit(b.dtype)) {
      std::vector<float> wide = widen(b);
      RF_CHECK_MPI(MPI_Ireduce(root ? MPI_IN_PLACE : wide.data(), wide.data(), count, MPI_FLOAT,
                               mpi_op(o.op), o.root, comm_, &req[0]));
      wait_or_timeout(op, req, "MPI_Ireduce");
      if (!root) return;
      if (o.op == ReduceOp::avg) finish_average({wide.data(), count, DType::f32}, size());
      narrow_into(b, wide);
    } else {
      RF_CHECK_MPI(MPI_Ireduce(root ? MPI_IN_PLACE : b.data, b.data, count,
                               transfer_type(b.dtype), mpi_op(o.op), o.root, comm_, &req[0]));
      wait_or_timeout(op, req, "MPI_Ireduce");
      if (root && o.op == ReduceOp::avg) finish_average(b, size());
    }
  });
}

// MPI's own allreduce reduces 16-bit floats widened to f32 (wire_bytes).
Traffic MpiProcessGroup::allreduce_traffic_model(int64_t count, DType dtype, Algorithm algo) const {
  if (resolve_allreduce(static_cast<size_t>(count) * dtype_size(dtype), algo) != Algorithm::native)
    return QueuedProcessGroup::allreduce_traffic_model(count, dtype, algo);
  return allreduce_traffic(Algorithm::native, count, static_cast<size_t>(wire_bytes(dtype, true)),
                           size(), rank());
}

std::shared_ptr<Work> MpiProcessGroup::do_allreduce(const Tensor& t, const CollectiveOptions& o) {
  check_count("allreduce", t.numel());
  Fingerprint fp = make_fp(Kind::allreduce, t.dtype(), t.numel(), o);
  const Algorithm algo =
      resolve_allreduce(static_cast<size_t>(t.numel()) * dtype_size(t.dtype()), o.algorithm);
  fp.algorithm = static_cast<int32_t>(algo);
  return enqueue_collective(fp, o, {{t, /*in=*/true, /*out=*/true}}, [this, o, algo](Op& op) {
    const Buffer b = op.host(0);
    const int count = static_cast<int>(b.count);
    if (algo == Algorithm::native) {
      op.work->set_traffic(allreduce_traffic(algo, b.count,
                                             static_cast<size_t>(wire_bytes(b.dtype, true)),
                                             size(), rank()));
      std::vector<MPI_Request> req(1);
      if (is_16bit(b.dtype)) {
        std::vector<float> wide = widen(b);
        RF_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, wide.data(), count, MPI_FLOAT, mpi_op(o.op),
                                    comm_, &req[0]));
        wait_or_timeout(op, req, "MPI_Iallreduce");
        if (o.op == ReduceOp::avg) finish_average({wide.data(), count, DType::f32}, size());
        narrow_into(b, wide);
      } else {
        RF_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, b.data, count, transfer_type(b.dtype),
                                    mpi_op(o.op), comm_, &req[0]));
        wait_or_timeout(op, req, "MPI_Iallreduce");
        if (o.op == ReduceOp::avg) finish_average(b, size());
      }
      return;
    }
    run_own_allreduce(op, b, algo, o);
  });
}

void MpiProcessGroup::run_own_allreduce(Op& op, Buffer b, Algorithm algo, const CollectiveOptions& o) {
  run_on_transport(op, cat("the ", algorithm_name(algo), " allreduce"), [&](Transport& tr) {
    run_allreduce(tr, b, algo, o.op, o.root, &host_of());
  });
}

void MpiProcessGroup::run_on_transport(Op& op, const std::string& what,
                                       const std::function<void(Transport&)>& body) {
  op.work->set_status(cat("running ", what));
  MpiTransport mpi_transport(algo_comm_, MpiTransport::kDefaultTag, op.deadline);
  mpi_transport.set_waiters(waiters());
  mpi_transport.set_liveness([this] { return dead_peers(); });
  if (transport_) transport_->set_deadline(op.deadline);
  CountingTransport transport(transport_ ? *transport_ : static_cast<Transport&>(mpi_transport));
  try {
    body(transport);
  } catch (const std::exception& e) {
    const std::string reason = cat(op.work->description(), " failed on rank ", rank(),
                                   " (timeout ", op.timeout.count(), " ms): ", e.what());
    mark_broken(reason);
    throw CommError(reason);
  }
  op.work->set_traffic(transport.traffic());
}

std::shared_ptr<Work> MpiProcessGroup::do_allgather(const Tensor& out, const Tensor& in,
                                                    const CollectiveOptions& o) {
  check_count("allgather", out.numel());
  return enqueue_collective(make_fp(Kind::allgather, in.dtype(), in.numel(), o), o,
                            {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/true, /*out=*/false}},
                            [this](Op& op) {
    const Buffer o = op.host(0), i = op.host(1);
    const MPI_Datatype type = transfer_type(i.dtype);
    const int m = static_cast<int>(i.count);
    std::vector<MPI_Request> req(1);
    RF_CHECK_MPI(MPI_Iallgather(i.data, m, type, o.data, m, type, comm_, &req[0]));
    wait_or_timeout(op, req, "MPI_Iallgather");
    op.work->set_traffic(ring_block_traffic(m, wire_bytes(i.dtype, false), size()));
  });
}

std::shared_ptr<Work> MpiProcessGroup::do_reduce_scatter(const Tensor& out, const Tensor& in,
                                                         const CollectiveOptions& o) {
  check_count("reduce_scatter", in.numel());
  return enqueue_collective(make_fp(Kind::reduce_scatter, out.dtype(), out.numel(), o), o,
                            {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/true, /*out=*/false}},
                            [this, o](Op& op) {
    const Buffer ob = op.host(0), ib = op.host(1);
    const int m = static_cast<int>(ob.count);
    op.work->set_traffic(ring_block_traffic(m, wire_bytes(ib.dtype, true), size()));
    std::vector<MPI_Request> req(1);
    if (is_16bit(ib.dtype)) {
      std::vector<float> wide_in = widen(ib);
      std::vector<float> wide_out(static_cast<size_t>(m));
      RF_CHECK_MPI(MPI_Ireduce_scatter_block(wide_in.data(), wide_out.data(), m, MPI_FLOAT,
                                             mpi_op(o.op), comm_, &req[0]));
      wait_or_timeout(op, req, "MPI_Ireduce_scatter_block");
      if (o.op == ReduceOp::avg) finish_average({wide_out.data(), m, DType::f32}, size());
      narrow_into(ob, wide_out);
    } else {
      RF_CHECK_MPI(MPI_Ireduce_scatter_block(ib.data, ob.data, m, transfer_type(ib.dtype),
                                             mpi_op(o.op), comm_, &req[0]));
      wait_or_timeout(op, req, "MPI_Ireduce_scatter_block");
      if (o.op == ReduceOp::avg) finish_average(ob, size());
    }
  });
}

std::shared_ptr<Work> MpiProcessGroup::do_gather(const Tensor& out, const Tensor& in,
                                                 const CollectiveOptions& o) {
  check_count("gather", in.numel());
  const bool root = rank() == o.root;
  return enqueue_collective(make_fp(Kind::gather, in.dtype(), in.numel(), o), o,
                            {{out, /*in=*/false, /*out=*/root}, {in, /*in=*/true, /*out=*/false}},
                            [this, root = o.root](Op& op) {
    const Buffer ob = op.host(0), ib = op.host(1);
    const MPI_Datatype type = transfer_type(ib.dtype);
    const int m = static_cast<int>(ib.count);
    void* recv = rank() == root ? ob.data : nullptr;
    std::vector<MPI_Request> req(1);
    RF_CHECK_MPI(MPI_Igather(ib.data, m, type, recv, m, type, root, comm_, &req[0]));
    wait_or_timeout(op, req, "MPI_Igather");
    const int64_t block = int64_t{m} * wire_bytes(ib.dtype, false);
    op.work->set_traffic(rank() == root ? Traffic{0, (size() - 1) * block, false}
                                       : Traffic{block, 0, false});
  });
}

std::shared_ptr<Work> MpiProcessGroup::do_scatter(const Tensor& out, const Tensor& in,
                                                  const CollectiveOptions& o) {
  check_count("scatter", out.numel());
  const bool root = rank() == o.root;
  return enqueue_collective(make_fp(Kind::scatter, out.dtype(), out.numel(), o), o,
                            {{out, /*in=*/false, /*out=*/true}, {in, /*in=*/root, /*out=*/false}},
                            [this, root = o.root](Op& op) {
    const Buffer ob = op.host(0), ib = op.host(1);
    const MPI_Datatype type = transfer_type(ob.dtype);
    const int m = static_cast<int>(ob.count);
    const void* send = rank() == root ? ib.data : nullptr;
    std::vector<MPI_Request> req(1);
    RF_CHECK_MPI(MPI_Iscatter(send, m, type, ob.data, m, type, root, comm_, &req[0]));
    wait_or_timeout(op, req, "MPI_Iscatter");
    const int64_t block = int64_t{m} * wire_bytes(ob.dtype, false);
    op.work->set_traffic(rank() == root ? Traffic{(size() - 1) * block, 0, false}
                                       : Traffic{0, block, false});
  });
}

std::shared_ptr<Work> MpiProcessGroup::do_barrier(const CollectiveOptions& o) {
  Fingerprint fp;
  fp.kind = static_cast<int32_t>(Kind::barrier);
  return enqueue_collective(fp, o, {}, [this](Op& op) {
    std::vector<MPI_Request> req(1);
    RF_CHECK_MPI(MPI_Ibarrier(comm_, &req[0]));
    wait_or_timeout(op, req, "MPI_Ibarrier");
  });
}

std::shared_ptr<Work> MpiProcessGroup::do_send(const Tensor& t, int peer, int tag,
                                               const CollectiveOptions& o) {
  check_count("send", t.numel());
  auto op = std::make_shared<Op>();
  op->timeout = o.timeout;
  op->args = {{t, /*in=*/true, /*out=*/false}};
  const auto describe_op = [&](int64_t seq) {
    return cat("send #", seq, " to rank ", peer, " (", dtype_name(t.dtype()), ", ", t.numel(),
               " elements, tag ", tag, ")");
  };
  op->body = [this, peer, tag](Op& op) {
    const Buffer b = op.host(0);
    std::vector<MPI_Request> req(1);
    RF_CHECK_MPI(MPI_Isend(b.data, static_cast<int>(b.count), transfer_type(b.dtype), peer, tag,
                           comm_, &req[0]));
    wait_or_timeout(op, req, cat("MPI_Isend to rank ", peer).c_str());
    op.work->set_traffic({b.count * wire_bytes(b.dtype, false), 0, /*measured=*/true});
  };
  return enqueue_p2p(std::move(op), describe_op);
}

std::shared_ptr<Work> MpiProcessGroup::do_recv(const Tensor& t, int peer, int tag,
                                               const CollectiveOptions& o) {
  check_count("recv", t.numel());
  auto op = std::make_shared<Op>();
  op->timeout = o.timeout;
  op->args = {{t, /*in=*/false, /*out=*/true}};
  const auto describe_op = [&](int64_t seq) {
    return cat("recv #", seq, " from rank ", peer, " (", dtype_name(t.dtype()), ", ", t.numel(),
               " elements, tag ", tag, ")");
  };
  op->body = [this, peer, tag](Op& op) {
    const Buffer b = op.host(0);
    std::vector<MPI_Request> req(1);
    const int count = static_cast<int>(b.count);
    RF_CHECK_MPI(MPI_Irecv(b.data, count, transfer_type(b.dtype), peer, tag, comm_, &req[0]));
    // A message that never comes can be cancelled, unlike a collective.
    MPI_Status status;
    const std::vector<int> peers{peer};
    std::vector<int> pending = poll(op, req, "MPI_Irecv", &status, &peers);
    if (!pending.empty()) {
      MPI_Cancel(&req[0]);
      MPI_Wait(&req[0], MPI_STATUS_IGNORE);
      throw CommError(cat(op.work->description(), " did not complete within ",
                          op.timeout.count(), " ms on rank ", rank(), ": rank ", peer,
                          " sent nothing"));
    }
    int got = 0;
    MPI_Get_count(&status, transfer_type(b.dtype), &got);
    if (got != count) {
      throw CommError(cat(op.work->description(), " on rank ", rank(), ": rank ", peer,
                          " sent ", got, " elements; the sender and receiver must agree"));
    }
    op.work->set_traffic({0, b.count * wire_bytes(b.dtype, false), /*measured=*/true});
  };
  return enqueue_p2p(std::move(op), describe_op);
}

}  // namespace ringflow::comm
