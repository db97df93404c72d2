// Allreduce benchmark in the nccl-tests convention: for each message size (4 B to 256 MB
// by default) and each algorithm (MPI's own MPI_Allreduce as "native", then ours: naive,
// tree, recursive_doubling, ring, and auto = what choose_allreduce picks), one row with
// the time per call, algbw = bytes / time and busbw = algbw * 2(n-1)/n (the bytes each
// rank must move, so busbw is comparable across world sizes), plus two references measured
// in the same run: busbw relative to native's at that size, and the single-thread memcpy
// bandwidth of this machine on a buffer of that size (rank 0; the bound a ring cannot beat
// by much, since every byte is received once and reduced once).
//
// Every result is checked before it is timed: rank r contributes (r + 1) * (1 + i % 7), so
// the result is a closed form (sum k n(n+1)/2, max k n, min k, avg sum / n). The timed
// calls then run on zeros (no overflow, no denormals). Time per call: ranks leave a
// barrier, run a batch of calls, and the slowest rank's batch time counts; the median over
// batches is reported, and the spread: busbw of the slowest and the fastest batch (at least
// --repeat batches and --min-ms of timed calls per row).
//
//   mpiexec -n 2 build/bench/collectives                 # table
//   mpiexec -n 2 build/bench/collectives --json out.json --max-bytes 64M
//
// --backend group|nccl times a process group's allreduce on tensors of --device instead
// (the same sizes, check and timing, each call waited for): group is MpiProcessGroup
// (MPI's own and our algorithms, CUDA tensors staged through pinned host memory), nccl is
// NcclProcessGroup (NCCL's allreduce on GPU tensors, one GPU per rank).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "ringflow/apps/choices.h"
#include "ringflow/comm/algorithms/allreduce.h"
#include "ringflow/comm/group/launch_group.h"
#include "ringflow/comm/group/mpi_process_group.h"
#include "ringflow/comm/bootstrap/mpi_bootstrap.h"
#include "ringflow/comm/transport/mpi_transport.h"
#include "ringflow/comm/transport/open_transport.h"
#include "ringflow/comm/group/nccl_process_group.h"
#include "ringflow/comm/transport/shm_transport.h"
#include "ringflow/comm/transport/tcp_transport.h"
#include "ringflow/framework/ops.h"

namespace {

using namespace ringflow;
using namespace ringflow::comm;
using ringflow::comm::ReduceOp;  // not the kernels' ReduceOp (sum, mean, max, ...)
using Clock = std::chrono::steady_clock;

// transport: our algorithms on the transports and MPI_Allreduce on host buffers; group:
// MpiProcessGroup's allreduce; nccl: NcclProcessGroup's.
enum class BenchBackend { transport, group, nccl };

struct Options {
  std::string min_bytes = "4", max_bytes = "256M";
  int factor = 4;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  std::vector<Algorithm> algorithms = {Algorithm::native, Algorithm::naive, Algorithm::tree,
                                       Algorithm::recursive_doubling, Algorithm::ring,
                                       Algorithm::automatic};
  size_t segment_bytes = 1 << 20;
  GroupTransport transport = GroupTransport::automatic;
  ShmTransportOptions shm;
  std::string socket_interface;
  int warmup = 2, repeat = 5;
  double min_ms = 100;
  std::string json;
  BenchBackend backend = BenchBackend::transport;
  Device device = Device::cpu();
};

// The flags' names: the library's own, and the benchmark's backends.
using ringflow::apps::choices_from;
const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
const Algorithm kAlgos[] = {Algorithm::native, Algorithm::naive, Algorithm::tree,
                            Algorithm::recursive_doubling, Algorithm::ring, Algorithm::hierarchical,
                            Algorithm::automatic};
const GroupTransport kTransports[] = {GroupTransport::automatic, GroupTransport::mpi,
                                      GroupTransport::shm, GroupTransport::hybrid, GroupTransport::tcp};
const ringflow::apps::Choices<BenchBackend> kBackends = {
    {"transport", BenchBackend::transport}, {"group", BenchBackend::group}, {"nccl", BenchBackend::nccl}};

size_t parse_bytes(const std::string& text) {
  size_t end = 0;
  const double value = std::stod(text, &end);
  const std::string unit = text.substr(end);
  double scale = 1;
  if (unit == "K" || unit == "k") scale = 1 << 10;
  else if (unit == "M" || unit == "m") scale = 1 << 20;
  else if (unit == "G" || unit == "g") scale = 1 << 30;
  else if (!unit.empty() && unit != "B") throw std::invalid_argument("bad size '" + text + "'");
  return static_cast<size_t>(value * scale);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;  // f16/bf16: MPI has no such type
  }
}

// One allreduce with `algo` ("native" is MPI_Allreduce; it has no avg: sum, then divide).
void run(Algorithm algo, Transport& t, MPI_Comm comm, Buffer buf, ReduceOp op,
         size_t segment_bytes, const std::vector<int>& host_of) {
  if (algo == Algorithm::automatic) {
    algo = choose_allreduce(buf.count * dtype_size(buf.dtype), t.size());
  }
  switch (algo) {
    case Algorithm::native: {
      const MPI_Op mop = op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
      MPI_Allreduce(MPI_IN_PLACE, buf.data, static_cast<int>(buf.count), mpi_type(buf.dtype), mop,
                    comm);
      if (op == ReduceOp::avg) finish_average(buf, t.size());
      return;
    }
    case Algorithm::naive: return naive_allreduce(t, buf, op);
    case Algorithm::tree: return tree_allreduce(t, buf, op);
    case Algorithm::recursive_doubling: return recursive_doubling_allreduce(t, buf, op);
    case Algorithm::ring: return ring_allreduce(t, buf, op, segment_bytes);
    case Algorithm::hierarchical: return hierarchical_allreduce(t, buf, op, host_of);
    case Algorithm::automatic: break;
  }
}

void fill(Buffer buf, int rank) {
  visit_dtype(buf.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(buf.data);
    for (int64_t i = 0; i < buf.count; ++i) p[i] = T(static_cast<float>((rank + 1) * (1 + i % 7)));
  });
}

// Elements that differ from the closed form.
int64_t count_wrong(Buffer buf, ReduceOp op, int n) {
  return visit_dtype(buf.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* p = static_cast<const T*>(buf.data);
    const bool integer = buf.dtype == DType::i32 || buf.dtype == DType::i64;
    int64_t wrong = 0;
    for (int64_t i = 0; i < buf.count; ++i) {
      const double k = 1 + static_cast<double>(i % 7), sum = k * n * (n + 1) / 2;
      double want = op == ReduceOp::sum   ? sum
                    : op == ReduceOp::max ? k * n
                    : op == ReduceOp::min ? k
                    : integer             ? std::trunc(sum / n)
                                          : sum / n;
      double got;
      if constexpr (std::is_integral_v<T> || std::is_same_v<T, double>) got = static_cast<double>(p[i]);
      else got = static_cast<float>(p[i]);
      if (got != want) ++wrong;
    }
    return wrong;
  });
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Single-thread memcpy bandwidth (GB/s, bytes copied per second), median of 5 copies.
double memcpy_gbps(size_t bytes, std::vector<unsigned char>& a, std::vector<unsigned char>& b) {
  if (bytes == 0) return 0;
  std::memcpy(b.data(), a.data(), bytes);  // fault in and warm up
  std::vector<double> s;
  const int reps = std::max<int>(5, static_cast<int>(std::min<size_t>(1000, (64u << 20) / bytes)));
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
      std::memcpy((i % 2 ? a : b).data(), (i % 2 ? b : a).data(), bytes);
    }
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  return bytes / median(s) / 1e9;
}

// Seconds per call over the timed batches, each the slowest rank's: the median reported,
// the fastest and slowest batch as the spread.
struct Timing {
  double median = 0, fastest = 0, slowest = 0;
};

// Warm-up calls, then --repeat batches of calls (enough for --min-ms in all, the batch size
// agreed on by rank 0), each started together after a barrier on comm.
Timing time_calls(const std::function<void()>& call, const Options& o, MPI_Comm comm) {
  const auto w0 = Clock::now();
  for (int i = 0; i < std::max(1, o.warmup); ++i) call();
  double per_call = std::chrono::duration<double>(Clock::now() - w0).count() / std::max(1, o.warmup);
  MPI_Bcast(&per_call, 1, MPI_DOUBLE, 0, comm);
  const int batch = std::clamp(
      static_cast<int>(o.min_ms / 1e3 / o.repeat / std::max(per_call, 1e-7)), 1, 100000);
  std::vector<double> local(o.repeat), slowest(o.repeat);
  for (int r = 0; r < o.repeat; ++r) {
    MPI_Barrier(comm);
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) call();
    local[r] = std::chrono::duration<double>(Clock::now() - t0).count() / batch;
  }
  MPI_Allreduce(local.data(), slowest.data(), o.repeat, MPI_DOUBLE, MPI_MAX, comm);
  return {median(slowest), *std::min_element(slowest.begin(), slowest.end()),
          *std::max_element(slowest.begin(), slowest.end())};
}

// busbw (GB/s) of `bytes` on n ranks at `seconds` per call; 0 for no time.
double busbw(size_t bytes, int n, double seconds) {
  if (seconds <= 0) return 0;
  return bytes / seconds / 1e9 * (n > 1 ? 2.0 * (n - 1) / n : 1.0);
}

// --backend group|nccl: `pg`'s allreduce on a tensor of `device`, checked against the closed
// form, then timed as the transports are (rank 0 prints; returns false on a wrong result).
bool bench_group(ProcessGroup& pg, Device device, const std::string& label, const Options& o,
                 DType dtype, ReduceOp op, const std::vector<Algorithm>& algos, size_t min_bytes,
                 size_t max_bytes) {
  const int rank = pg.rank(), n = pg.size();
  const size_t esize = dtype_size(dtype);
  bool all_ok = true;
  if (rank == 0) {
    fmt::print("# ringflow bench/collectives: {} allreduce on {} tensors, {} ranks, dtype {}, op {}\n",
               label, device.str(), n, dtype_name(dtype), reduce_op_name(op));
    fmt::print("{:>12} {:>11} {:>5} {:>18} {:>11} {:>10} {:>10} {:>17} {:>6}\n", "size(B)", "count", "type",
               "algorithm", "time(us)", "algbw", "busbw", "busbw min-max", "check");
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= o.factor) {
    const int64_t count = static_cast<int64_t>(bytes / esize);
    std::vector<unsigned char> host(count * esize);
    const Buffer hb{host.data(), count, dtype};
    for (Algorithm algo : algos) {
      const CollectiveOptions co{.op = op, .algorithm = algo};
      fill(hb, rank);
      Tensor t = empty({count}, dtype, Device::cpu());
      std::memcpy(t.kernel_view().data, host.data(), host.size());
      t = t.to(device);
      pg.allreduce(t, co)->wait();
      const Tensor back = t.to(Device::cpu());
      std::memcpy(host.data(), back.kernel_view().data, host.size());
      int64_t wrong = count_wrong(hb, op, n), wrong_any = 0;
      MPI_Allreduce(&wrong, &wrong_any, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      const bool ok = wrong_any == 0;
      all_ok &= ok;
      Timing tm;
      if (ok) {
        t.zero_();
        tm = time_calls([&] { pg.allreduce(t, co)->wait(); }, o, MPI_COMM_WORLD);
      }
      const double us = tm.median * 1e6, bytes_moved = static_cast<double>(count * esize);
      const double algbw = us > 0 ? bytes_moved / (us * 1e-6) / 1e9 : 0;
      const double bw = busbw(count * esize, n, tm.median);
      if (rank == 0) {
        fmt::print("{:>12} {:>11} {:>5} {:>18} {:>11.2f} {:>10.3f} {:>10.3f} {:>17} {:>6}\n", count * esize, count,
                   dtype_name(dtype), algorithm_name(algo), us, algbw, bw,
                   fmt::format("{:.3f}-{:.3f}", busbw(count * esize, n, tm.slowest),
                               busbw(count * esize, n, tm.fastest)),
                   ok ? "ok" : "FAIL");
        std::fflush(stdout);
      }
    }
    if (bytes > max_bytes / o.factor) break;
  }
  return all_ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"ringflow allreduce benchmark (nccl-tests rows); run under mpiexec"};
  app.add_option("--min-bytes", o.min_bytes, "smallest message (e.g. 4, 8K, 1M)");
  app.add_option("--max-bytes", o.max_bytes, "largest message (e.g. 256M)");
  app.add_option("--factor", o.factor, "size multiplier between rows")->check(CLI::Range(2, 1024));
  using ringflow::apps::add_choice;
  add_choice(app, "--dtype", o.dtype, choices_from(kDTypes, dtype_name), "the elements' type");
  add_choice(app, "--op", o.op, choices_from(kOps, reduce_op_name), "the reduction");
  const auto algorithm_names = choices_from(kAlgos, algorithm_name);
  app.add_option("--algorithms", o.algorithms, "the algorithms, in this order (hierarchical: "
                 "within each host, a ring among the hosts' first ranks)")
      ->default_str("native naive tree recursive_doubling ring auto")
      ->transform(ringflow::apps::choice_of(algorithm_names));
  app.add_option("--segment-bytes", o.segment_bytes, "ring segment size");
  add_choice(app, "--transport", o.transport, choices_from(kTransports, group_transport_name),
             "what our algorithms talk through: auto (shm where every rank is on this node, "
             "hybrid where hosts have several ranks, else tcp, else mpi), mpi, shm, hybrid (shm "
             "within hosts, tcp across), tcp");
  app.add_option("--socket-interface", o.socket_interface,
                 "tcp transport: the network interface (default: the first up, not loopback)");
  app.add_option("--shm-slot-bytes", o.shm.slot_bytes, "shm transport: bytes per slot");
  app.add_option("--shm-slots", o.shm.slots, "shm transport: slots per channel");
  app.add_option("--warmup", o.warmup, "untimed calls after the checked one");
  app.add_option("--repeat", o.repeat, "timed batches per row (at least)");
  app.add_option("--min-ms", o.min_ms, "timed milliseconds per row (at least)");
  app.add_option("--json", o.json, "also write the rows to this file (rank 0)");
  add_choice(app, "--backend", o.backend, kBackends, "transport: our algorithms on the "
             "transports and MPI_Allreduce on host buffers; group: MpiProcessGroup's allreduce on "
             "--device tensors; nccl: NcclProcessGroup's on GPU tensors");
  app.add_option_function<std::string>(
         "--device",
         [&o](const std::string& v) {
           try {
             o.device = Device::parse(v);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError("--device", e.what());
           }
         },
         "--backend group|nccl: cpu or cuda (each rank its node-local GPU)")
      ->default_str("cpu");

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : (e.get_exit_code() != 0);
    MPI_Finalize();
    return code;
  }

  int status = 0;
  try {
    const DType dtype = o.dtype;
    const comm::ReduceOp op = o.op;
    std::vector<Algorithm> algos = o.algorithms;
    const size_t esize = dtype_size(dtype);
    const size_t min_bytes = std::max(parse_bytes(o.min_bytes), esize);
    const size_t max_bytes = parse_bytes(o.max_bytes);
    if (o.backend != BenchBackend::transport) {
      Device device = o.device;
      std::shared_ptr<ProcessGroup> pg;
      if (o.backend == BenchBackend::nccl) {
        if (!device.is_cuda()) throw std::invalid_argument("--backend nccl needs --device cuda");
        auto nccl = std::make_shared<NcclProcessGroup>(MPI_COMM_WORLD);
        device = Device::cuda(nccl->device());
        pg = nccl;
      } else {
        pg = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD);
      }
      if (o.backend == BenchBackend::nccl) algos = {Algorithm::native};
      status = bench_group(*pg, device, o.backend == BenchBackend::nccl ? "NCCL" : "MpiProcessGroup", o, dtype, op,
                           algos, min_bytes, max_bytes) ? 0 : 1;
      pg.reset();
      MPI_Finalize();
      return status;
    }

    MPI_Comm comm, native_comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &native_comm);
    // The process group's choice (comm/group/mpi_process_group.h): shared memory on one node,
    // else TCP, else MPI; or the one asked for.
    MpiTransport mpi_transport(comm);
    MpiBootstrap bootstrap(comm);
    const std::vector<int> host_of = host_indices(bootstrap.allgather(node_identity()));
    std::string transport_name = "mpi";
    OpenedTransport opened;
    if (const std::optional<TransportKind> kind = transport_kind_of(o.transport)) {
      opened = open_transport(bootstrap, host_of, {.kind = *kind, .shm = o.shm,
                                                   .tcp = {.interface = o.socket_interface}});
      if (!opened.transport && o.transport != GroupTransport::automatic) {
        throw std::runtime_error(fmt::format("--transport {}: {}", group_transport_name(o.transport),
                                             opened.why_not));
      }
    }
    if (opened.transport) {
      transport_name = transport_kind_name(opened.kind);
      if (const auto* shm = dynamic_cast<const ShmTransport*>(opened.transport.get())) {
        transport_name += fmt::format(" ({} slots of {} B per channel)", shm->slots(), shm->slot_bytes());
      } else if (const auto* tcp = dynamic_cast<const TcpTransport*>(opened.transport.get())) {
        transport_name += fmt::format(" (rank 0 at {})", tcp->address());
      }
    } else if (!opened.why_not.empty()) {
      transport_name += fmt::format(" ({})", opened.why_not);
    }
    Transport& transport = opened.transport ? *opened.transport : static_cast<Transport&>(mpi_transport);
    std::vector<unsigned char> data(max_bytes + 64), spare(rank == 0 ? max_bytes + 64 : 0);

    if (rank == 0) {
      fmt::print("# ringflow bench/collectives: allreduce, {} ranks, dtype {}, op {}, ring segment {} B\n"
                 "# our algorithms' transport: {}\n",
                 n, dtype_name(dtype), reduce_op_name(op), o.segment_bytes, transport_name);
      fmt::print("# busbw = algbw * 2(n-1)/n (median batch; min-max: slowest and fastest batch);\n"
                 "# vs_native = busbw / MPI_Allreduce busbw at that size;\n"
                 "# memcpy = single-thread memcpy GB/s on rank 0 at that size (the bound)\n");
      fmt::print("{:>12} {:>11} {:>5} {:>18} {:>11} {:>10} {:>10} {:>17} {:>9} {:>10} {:>6}\n", "size(B)",
                 "count", "type", "algorithm", "time(us)", "algbw", "busbw", "busbw min-max",
                 "vs_native", "memcpy", "check");
    }
    nlohmann::json rows = nlohmann::json::array();
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= o.factor) {
      const int64_t count = static_cast<int64_t>(bytes / esize);
      const Buffer buf{data.data(), count, dtype};
      double bound = 0;
      if (rank == 0) bound = memcpy_gbps(count * esize, data, spare);
      MPI_Bcast(&bound, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      double native_busbw = 0;
      for (Algorithm algo : algos) {
        if (algo == Algorithm::native && mpi_type(dtype) == MPI_DATATYPE_NULL) continue;
        // Check.
        fill(buf, rank);
        run(algo, transport, native_comm, buf, op, o.segment_bytes, host_of);
        int64_t wrong = count_wrong(buf, op, n), wrong_any = 0;
        MPI_Allreduce(&wrong, &wrong_any, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        const bool ok = wrong_any == 0;
        std::string name = algorithm_name(algo);
        if (algo == Algorithm::automatic) {
          name = std::string("auto:") + algorithm_name(choose_allreduce(count * esize, n));
        }
        Timing tm;
        if (ok) {
          std::memset(buf.data, 0, count * esize);
          tm = time_calls([&] { run(algo, transport, native_comm, buf, op, o.segment_bytes, host_of); }, o, comm);
        } else {
          status = 1;
        }
        const double us = tm.median * 1e6;
        const double algbw = us > 0 ? count * esize / (us * 1e-6) / 1e9 : 0;
        const double bw = busbw(count * esize, n, tm.median);
        const double bw_min = busbw(count * esize, n, tm.slowest);
        const double bw_max = busbw(count * esize, n, tm.fastest);
        if (algo == Algorithm::native) native_busbw = bw;
        const double vs_native = native_busbw > 0 ? bw / native_busbw : 0;
        if (rank == 0) {
          fmt::print("{:>12} {:>11} {:>5} {:>18} {:>11.2f} {:>10.3f} {:>10.3f} {:>17} {:>9.2f} {:>10.2f} {:>6}\n",
                     count * esize, count, dtype_name(dtype), name, us, algbw, bw,
                     fmt::format("{:.3f}-{:.3f}", bw_min, bw_max), vs_native, bound,
                     ok ? "ok" : "FAIL");
          std::fflush(stdout);
          rows.push_back({{"bytes", count * esize}, {"count", count},
                          {"dtype", dtype_name(dtype)}, {"op", reduce_op_name(op)},
                          {"algorithm", name}, {"time_us", us}, {"algbw_GBps", algbw},
                          {"busbw_GBps", bw}, {"busbw_min_GBps", bw_min},
                          {"busbw_max_GBps", bw_max}, {"vs_native", vs_native},
                          {"memcpy_GBps", bound}, {"check", ok ? "ok" : "fail"}});
        }
      }
      if (bytes > max_bytes / o.factor) break;  // no overflow past max_bytes
    }
    if (rank == 0 && !o.json.empty()) {
      nlohmann::json doc = {{"bench", "collectives"}, {"collective", "allreduce"},
                            {"world_size", n}, {"segment_bytes", o.segment_bytes},
                            {"transport", transport_name},
                            {"rows", rows}};
      std::ofstream(o.json) << doc.dump(2) << "\n";
    }
    MPI_Comm_free(&comm);
    MPI_Comm_free(&native_comm);
  } catch (const std::exception& e) {
    fmt::print(stderr, "collectives: rank {}: {}\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
