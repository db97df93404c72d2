#include "ringflow/apps/train_flags.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "ringflow/apps/checkpointing.h"
#include "ringflow/apps/data_choice.h"
#include "ringflow/comm/base/build_info.h"
#include "ringflow/framework/ringflow.h"
#include "ringflow/models/registry.h"

namespace ringflow::apps {
namespace {

// CLI11's PositiveNumber prints the whole double range in its message; say it plainly.
CLI::Validator bound(double limit, bool inclusive) {
  return CLI::Validator(
      [=](std::string& s) {
        double v = 0;
        try { v = std::stod(s); } catch (const std::exception&) { return "not a number: " + s; }
        if (inclusive ? v >= limit : v > limit) return std::string();
        return fmt::format("must be {} {}, got {}", inclusive ? ">=" : ">", limit, s);
      },
      fmt::format("{} {}", inclusive ? ">=" : ">", limit));
}

// Threads beyond a few per core only take turns (and tens of thousands overflow the OpenMP
// runtime's stacks): at most 4 per core of this machine, at least 8.
CLI::Validator at_most_threads(const char* what) {
  const int limit = std::max(8, 4 * static_cast<int>(std::thread::hardware_concurrency()));
  return CLI::Validator(
      [=](std::string& s) {
        long v = 0;
        try { v = std::stol(s); } catch (const std::exception&) { return "not a number: " + s; }
        if (v <= limit) return std::string();
        return fmt::format("{} {} {}: at most {} (4 per core of this machine's {})", s, what,
                           v == 1 ? "" : "are too many", limit, std::thread::hardware_concurrency());
      },
      fmt::format("<= {}", limit));
}

// --device's value: cpu, cuda, cuda:N or auto (N taken literally: check_device looks at the
// machine later).
DeviceFlag parse_device_flag(const std::string& v) {
  using Kind = DeviceFlag::Kind;
  if (v == "auto") return {};
  if (v == "cuda") return {Kind::cuda};  // not Device::parse's cuda:0: each rank its own GPU
  try {
    const Device d = Device::parse(v);
    return d.is_cpu() ? DeviceFlag{Kind::cpu} : DeviceFlag{Kind::cuda, d.index};
  } catch (const std::invalid_argument&) {
    throw CLI::ValidationError("--device " + v, "expected cpu, cuda, cuda:N or auto");
  }
}

// --comm-thread-cpu's value: auto, none or a CPU's number.
CommThreadCpu parse_comm_thread_cpu(const std::string& v) {
  if (v == "auto") return {CommThreadCpu::Kind::automatic};
  if (v == "none") return {};
  const bool digits = !v.empty() && v.size() < 7 &&
                      std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits)
    throw CLI::ValidationError("--comm-thread-cpu", "expected auto, none or a CPU number, got '" + v + "'");
  return {CommThreadCpu::Kind::cpu, std::stoi(v)};
}

// The flags in groups, added in the order `train --help` lists them.

// What is trained, on what, and the optimizer.
void add_training_flags(CLI::App& app, Flags& f) {
  const auto above0 = bound(0, false), at_least0 = bound(0, true);
  app.add_option("--model", f.model, "model name")->capture_default_str()
      ->check(CLI::IsMember(models::model_names()));
  add_choice(app, "--dataset", f.dataset, dataset_choices(), "data set");
  app.add_option("--data-dir", f.data_dir, "folder of the data set's files (default: "
                 "/usr/share/datasets/fashion-mnist, data/cifar-10-batches-bin); imagefolder: "
                 "DIR/train/<class>/<image> and DIR/val/<class>/<image> (JPEG, PNG); shards: "
                 "DIR/train/*.tar and DIR/val/*.tar (ringflow-pack)");
  app.add_option("--epochs", f.epochs, "passes over the training set")->capture_default_str()->check(above0);
  auto* local_batch = app.add_option("-b,--batch-size,--local-batch", f.batch_size,
                                     "images per step, per rank and micro-batch (weak scaling)")
      ->capture_default_str()->check(above0);
  app.add_option("--global-batch", f.global_batch, "images per step over all ranks and micro-batches; "
                 "each rank takes its share (strong scaling)")->check(above0)->excludes(local_batch);
  add_choice(app, "--optimizer", f.optimizer, optimizer_choices(), "torch.optim's SGD (with "
             "--momentum), Adam or AdamW (decoupled weight decay)");
  app.add_option("--lr,--learning-rate", f.lr, "learning rate")->capture_default_str()->check(above0);
  app.add_option("--momentum", f.momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay,--wd", f.weight_decay, "weight decay (L2 for sgd and adam, "
                 "decoupled for adamw)")->capture_default_str()->check(at_least0);
  app.add_option("--on-nonfinite", f.on_nonfinite, "a loss or gradients holding inf or NaN: "
                 "stop the run naming the iteration, skip that optimizer step (decided on the "
                 "averaged gradients, the same on every rank; fp16's scaler skips on its own), or "
                 "ignore; a model that is not finite is never written to or read from a checkpoint "
                 "(ignore: a warning)")->default_str("stop")->transform(choice_of(on_nonfinite_choices()));
  app.add_option("--nonfinite-check-every", f.nonfinite_check_every, "optimizer steps between "
                 "looks at the gradients' norm (the loss is looked at every step; 0: never; skip "
                 "looks every step)")->capture_default_str()->check(bound(0, true));
  app.add_option("--clip-grad-norm", f.clip_grad_norm, "scale the gradients down to this global "
                 "L2 norm where it is larger (torch.nn.utils.clip_grad_norm_; 0: never)")
      ->capture_default_str()->check(at_least0);
  app.add_option("--label-smoothing", f.label_smoothing, "label smoothing of the cross-entropy "
                 "loss, in training and evaluation (torch.nn.CrossEntropyLoss's)")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--weights", f.weights, "start from this model state_dict (safetensors; PyTorch's "
                 "names, e.g. a torchvision model's saved with safetensors.torch.save_file), "
                 "strictly: every tensor present, none extra, each of the model's shape");
  add_choice(app, "--schedule", f.schedule, schedule_choices(), "learning-rate schedule over the epochs");
  app.add_option("--warmup-epochs", f.warmup_epochs, "linear warm-up epochs before the schedule")
      ->capture_default_str()->check(at_least0);
}

// Where and how it computes: threads, convolutions, device, loaders, seed.
void add_execution_flags(CLI::App& app, Flags& f) {
  const auto at_least0 = bound(0, true);
  app.add_option("--threads", f.threads, "CPU threads per rank (0: the machine's cores shared "
                 "between its ranks)")->capture_default_str()->check(at_least0)
      ->check(at_most_threads("threads"));
  add_choice(app, "--conv-algo", f.conv_algo, conv_algorithm_choices(), "CPU convolutions: auto "
             "(Winograd where faster: oneDNN's in f32 with AVX-512, ours in f32 with AVX2 only and in "
             "bf16 without AMX) or direct (the plain sum, as PyTorch's)");
  add_choice(app, "--memory-format", f.memory_format, memory_format_choices(), "layout of the "
             "activations between layers: nchw, nhwc (channels-last), or auto (f32 on the CPU: oneDNN's "
             "blocked layout between oneDNN ops; channels-last elsewhere where the convolutions run "
             "fastest so: oneDNN on the CPU, 16-bit and TF32 on CUDA); parameters and checkpoints stay in "
             "PyTorch's layout");
  app.add_flag("--cuda-graphs", f.cuda_graphs, "capture forward and backward as a CUDA graph after 3 "
               "steps and replay it (the optimizer stays eager); where a step cannot be captured, one "
               "line says why and it runs eagerly");
  app.add_option_function<std::string>(
         "--device", [&f](const std::string& v) { f.device = parse_device_flag(v); },
         "cpu, cuda (each rank its node-local GPU), cuda:N, or auto (the GPU when one is usable, "
         "else the CPU)")
      ->default_str("auto");
  add_choice(app, "--backend", f.backend, backend_choices(), "process group of the gradients: mpi, "
             "nccl (GPU tensors), or auto (nccl when each rank has a GPU of its own)");
  app.add_option("-j,--workers", f.workers, "data-loading threads (0: load in the training thread)")
      ->capture_default_str()->check(at_least0)->check(at_most_threads("workers"));
  app.add_option("--prefetch-factor", f.prefetch_factor, "batches each data-loading thread builds ahead")
      ->capture_default_str()->check(bound(1, true));
  app.add_flag("--no-memory-check", f.no_memory_check, "train even where the step's measured memory "
               "estimate (CPU) exceeds what the host has available");
  add_choice(app, "--precision", f.precision, precision_choices(), "fp32, or bf16 / fp16: mixed "
             "precision (autocast: convolutions and linear layers in 16 bits with f32 "
             "accumulation, the rest and the master weights in f32; fp16 with dynamic loss scaling)");
  app.add_option("--seed", f.seed, "seed of initialisation, shuffling and augmentation")->capture_default_str();
}

// How long it runs and what it writes: log lines, evaluation, checkpoints, metrics, trace.
void add_output_flags(CLI::App& app, Flags& f) {
  const auto above0 = bound(0, false), at_least0 = bound(0, true);
  app.add_option("-p,--log-every,--print-freq", f.log_every, "iterations between loss lines (where "
                 "the output is no terminal, with the speed and the time left)")
      ->capture_default_str()->check(above0);
  app.add_flag("--quiet", f.quiet, "print each epoch's training and test results and errors only");
  app.add_option("--max-iters", f.max_iters, "stop each epoch after this many iterations (0: all)")
      ->capture_default_str()->check(at_least0);
  app.add_flag("-e,--evaluate", f.evaluate, "evaluate the model of --weights or --resume on the "
               "test set, print its loss and accuracy, and exit");
  app.add_option("--export-weights", f.export_weights, "at the end, write the model's state_dict "
                 "(safetensors, PyTorch's names: loadable by torch's load_state_dict; rank 0)");
  app.add_option("--eval-every", f.eval_every, "epochs between test-set evaluations (0: none, "
                 "e.g. for timing runs)")->capture_default_str()->check(at_least0);
  app.add_option("--metrics", f.metrics, "append JSON lines to this file (rank 0): a header "
                 "(arguments, version, commit, hosts, world size), then iterations and epochs, "
                 "each with its wall_time (Unix seconds); under mpiexec each iteration's line, "
                 "with the mean and max over the ranks, is written at the end of its epoch");
  app.add_option("--trace", f.trace, "write a Chrome trace-event JSON of every iteration (opens "
                 "in ui.perfetto.dev, chrome://tracing): compute spans on one track, each "
                 "collective on another; under mpiexec one file per rank, the rank inserted "
                 "before the extension (trace.json: trace.rank0.json, trace.rank1.json, ...)");
}

// Checkpoints and resuming (apps/checkpointing.h).
void add_checkpoint_flags(CLI::App& app, Flags& f) {
  app.add_option("--checkpoint", f.checkpoint, "write a checkpoint to this file after every epoch "
                 "(and every --checkpoint-every iterations), replacing the last");
  auto* dir = app.add_option("--checkpoint-dir", f.checkpoint_dir, "write a checkpoint into this "
                             "folder after every epoch and every --checkpoint-every iterations, "
                             "one file each (checkpoint-<iteration>.safetensors; the folder is "
                             "made where missing)");
  app.add_option("--checkpoint-every", f.checkpoint_every, "iterations between checkpoints within "
                 "the epochs (0: at the epochs' ends only); a run resumed from one continues bit "
                 "for bit")->capture_default_str()->check(bound(0, true));
  app.add_option("--checkpoint-keep", f.checkpoint_keep, "--checkpoint-dir: how many of the newest "
                 "checkpoints to keep")->capture_default_str()->check(bound(1, true))->needs(dir);
  app.add_option_function<std::string>(
      "--resume",
      [&f](const std::string& v) {
        f.resume_auto = v == "auto";
        f.resume = f.resume_auto ? "" : v;
      },
      "continue the run saved in this checkpoint, or auto: the newest in --checkpoint-dir (or "
      "--checkpoint FILE where it exists), else start afresh; a run that restarts itself "
      "(torchrun --max-restarts, a Slurm requeue) passes auto every time");
  app.add_flag("--resume-model-only", f.resume_model_only, "--resume: the model's weights alone "
               "(the optimizer starts afresh; for a file without optimizer state)");
}

// Data parallelism: the sync strategy, its algorithm, the launcher and transport, ddp's knobs.
void add_parallel_flags(CLI::App& app, Flags& f) {
  const auto above0 = bound(0, false), at_least0 = bound(0, true);
  add_choice(app, "--sync", f.sync, sync_choices(), "gradient synchronisation: none (one process), "
             "gather-scatter, allreduce (each gradient after backward), ddp (bucketed, overlapped) "
             "or fedavg (federated averaging of the models); the others under mpiexec -n N, "
             "torchrun or srun");
  add_choice(app, "--algo", f.algo, algorithm_choices(), "allreduce algorithm of --sync allreduce, "
             "ddp and fedavg's --fed-topology allreduce (rd: recursive doubling; hierarchical: "
             "within each node to its first rank, a ring among the nodes, back; auto picks it for "
             "large messages when ranks share nodes across several)");
  add_choice(app, "--launcher", f.launcher, launcher_choices(), "how the ranks were started: mpi "
             "(mpiexec, srun with PMI), env (torchrun's RANK, WORLD_SIZE, MASTER_ADDR, "
             "MASTER_PORT, or Slurm's SLURM_PROCID, SLURM_NTASKS: a TCP rendezvous, no MPI), or "
             "auto (by the environment)");
  add_choice(app, "--transport", f.transport, transport_choices(), "what our allreduce algorithms "
             "talk through: auto (shared memory on one node; across nodes, shared memory within "
             "each and TCP between them), shm, hybrid (shm+tcp), tcp or mpi (MPI point to point)");
  app.add_option("--socket-interface", f.socket_interface,
                 "--transport tcp: the network interface (default: the first up, not loopback)");
  app.add_option_function<std::string>(
         "--bucket-cap-mb",
         [&f](const std::string& v) {
           f.tune_buckets = v == "auto";
           if (f.tune_buckets) return;
           size_t used = 0;
           double mb = -1;
           try {
             mb = std::stod(v, &used);
           } catch (const std::exception&) {
           }
           if (used != v.size() || !(mb >= 0) || !std::isfinite(mb))
             throw CLI::ValidationError("--bucket-cap-mb", "'" + v + "' is neither a number >= 0 nor auto");
           f.bucket_cap_mb = mb;
         },
         "ddp: MiB per gradient bucket (0: one per parameter), or auto: chosen by measuring "
         "the first iterations with several caps (comm/ddp/bucket_tuner.h)")
      ->default_str("25");
  add_choice(app, "--comm-hook", f.comm_hook, comm_hook_choices(), "ddp: allreduce (average), fp16 "
             "(compressed) or noop (no communication, gradients stay local: a reference for "
             "measurements only); allreduce: allreduce or noop");
  app.add_flag("--find-unused", f.find_unused, "ddp: look for parameters the loss does not reach "
               "after each forward");
  app.add_option("--grad-accum", f.grad_accum, "micro-batches per optimizer step (ddp: no_sync "
                 "for all but the last)")->capture_default_str()->check(bound(1, true));
  app.add_option("--comm-timeout", f.comm_timeout_s, "seconds a collective may take before the "
                 "run fails (rank 0 evaluates alone meanwhile)")->capture_default_str()->check(above0);
  app.add_option_function<std::string>(
         "--comm-thread-cpu", [&f](const std::string& v) { f.comm_thread_cpu = parse_comm_thread_cpu(v); },
         "where the communication thread runs: auto (a core of its own, the compute threads on "
         "the rest of this rank's share of the node's cores, where that share holds a core "
         "beyond --threads), none (where the OS puts it), or a CPU number (the compute threads "
         "on the others)")
      ->default_str("none");
}

// Federated averaging and the users' data.
void add_federated_flags(CLI::App& app, Flags& f) {
  app.add_option("--local-steps", f.local_steps, "fedavg: average the models every H local "
                 "optimizer steps (and at each epoch's end)")->check(bound(1, true));
  app.add_option("--local-epochs", f.local_epochs, "fedavg: average the models after every E "
                 "local epochs (and after the last; the default, with E = 1)")->check(bound(1, true));
  add_choice(app, "--fed-topology", f.fed_topology, fed_topology_choices(), "fedavg: cloud (every "
             "model to rank 0 and the average back, as a federated server) or allreduce (--algo)");
  add_choice(app, "--comm-precision", f.comm_precision, precision_choices(),
             "fedavg: what the models travel as");
  app.add_option_function<std::string>(
         "--partition",
         [&f](const std::string& v) {
           try {
             f.partition = data::partition_from_name(v);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError("--partition", e.what());
           }
         },
         "how the training set is split among the ranks: iid (equal random shares) or "
         "dirichlet:ALPHA (by label, Dirichlet(ALPHA) proportions per class: non-IID users)")
      ->default_str("iid");
}

}  // namespace

void add_flags(CLI::App& app, Flags& f) {
  app.set_version_flag("--version",
                       [] {
                         std::string text = describe(comm::build_info());
                         text.pop_back();  // CLI11 ends the line
                         return text;
                       },
                       "print the version, commit, build options, the CPU's instruction sets "
                       "and the libraries' versions, and exit");
  app.set_config("--config", "", "read flags from this TOML or INI file (`batch-size = 64`, "
                 "`quiet = true`: long names without dashes); the command line overrides it");
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is named, not ignored
  add_training_flags(app, f);
  add_execution_flags(app, f);
  add_output_flags(app, f);
  add_checkpoint_flags(app, f);
  add_parallel_flags(app, f);
  add_federated_flags(app, f);
  add_image_data_flags(app, f);
}

void check_flag_combinations(const Flags& f) {
  if (f.sync != SyncMode::fedavg) {
    for (const auto& [flag, set] : {std::pair{"--local-steps", f.local_steps > 0},
                                    std::pair{"--local-epochs", f.local_epochs > 0},
                                    std::pair{"--fed-topology", f.fed_topology != comm::AverageTopology::cloud},
                                    std::pair{"--comm-precision", f.comm_precision != DType::f32}}) {
      if (set)
        throw std::invalid_argument(fmt::format(
            "{} applies to --sync fedavg, not --sync {} (ddp compresses with --comm-hook fp16)",
            flag, flag_name(f.sync)));
    }
  }
  using comm::CommHookKind;
  const bool hook_applies = f.sync == SyncMode::ddp ||
                            (f.sync == SyncMode::allreduce && f.comm_hook == CommHookKind::noop);
  if (f.comm_hook != CommHookKind::allreduce && !hook_applies)
    throw std::invalid_argument(fmt::format(
        "--comm-hook {} applies to --sync ddp{}, not --sync {}", flag_name(f.comm_hook),
        f.comm_hook == CommHookKind::noop ? " and allreduce" : "", flag_name(f.sync)));
  if (f.evaluate && f.weights.empty() && f.resume.empty() && !f.resume_auto)
    throw std::invalid_argument("--evaluate evaluates the model of --weights FILE or --resume "
                                "FILE: give one");
  if (f.local_steps > 0 && f.local_epochs > 0)
    throw std::invalid_argument("--local-steps and --local-epochs exclude each other: a round "
                                "every H steps, or every E epochs");
  check_checkpoint_flags(f);
}

const Choices<OptimizerKind>& optimizer_choices() {
  static const Choices<OptimizerKind> c{
      {"sgd", OptimizerKind::sgd}, {"adam", OptimizerKind::adam}, {"adamw", OptimizerKind::adamw}};
  return c;
}

const Choices<DatasetKind>& dataset_choices() {
  static const Choices<DatasetKind> c{{"fashion-mnist", DatasetKind::fashion_mnist},
                                      {"cifar10", DatasetKind::cifar10},
                                      {"synthetic", DatasetKind::synthetic},
                                      {"imagefolder", DatasetKind::imagefolder},
                                      {"shards", DatasetKind::shards}};
  return c;
}

const Choices<ScheduleKind>& schedule_choices() {
  static const Choices<ScheduleKind> c{{"none", ScheduleKind::none}, {"step", ScheduleKind::step},
                                       {"multistep", ScheduleKind::multistep},
                                       {"cosine", ScheduleKind::cosine}};
  return c;
}

const Choices<OnNonFinite>& on_nonfinite_choices() {
  static const Choices<OnNonFinite> c{
      {"stop", OnNonFinite::stop}, {"skip", OnNonFinite::skip}, {"ignore", OnNonFinite::ignore}};
  return c;
}

const Choices<BackendKind>& backend_choices() {
  static const Choices<BackendKind> c{
      {"auto", BackendKind::automatic}, {"mpi", BackendKind::mpi}, {"nccl", BackendKind::nccl}};
  return c;
}

const Choices<SyncMode>& sync_choices() {
  static const SyncMode modes[] = {SyncMode::none, SyncMode::gather_scatter, SyncMode::allreduce, SyncMode::ddp,
                                   SyncMode::fedavg};
  static const Choices<SyncMode> c = choices_from(modes, sync_mode_name);
  return c;
}

const Choices<comm::Algorithm>& algorithm_choices() {
  using A = comm::Algorithm;
  static const Choices<A> c{{"auto", A::automatic}, {"ring", A::ring}, {"tree", A::tree},
                            {"rd", A::recursive_doubling}, {"native", A::native},
                            {"naive", A::naive}, {"hierarchical", A::hierarchical}};
  return c;
}

const Choices<comm::Launcher>& launcher_choices() {
  using L = comm::Launcher;
  static const L launchers[] = {L::automatic, L::mpi, L::env};
  static const Choices<L> c = choices_from(launchers, comm::launcher_name);
  return c;
}

const Choices<comm::GroupTransport>& transport_choices() {
  using T = comm::GroupTransport;
  static const T transports[] = {T::automatic, T::shm, T::hybrid, T::tcp, T::mpi};
  static const Choices<T> c = choices_from(transports, comm::group_transport_name);
  return c;
}

const Choices<comm::CommHookKind>& comm_hook_choices() {
  using H = comm::CommHookKind;
  static const H kinds[] = {H::allreduce, H::fp16, H::noop};
  static const Choices<H> c = choices_from(kinds, comm::comm_hook_name);
  return c;
}

const Choices<comm::AverageTopology>& fed_topology_choices() {
  using T = comm::AverageTopology;
  static const T topologies[] = {T::cloud, T::allreduce};
  static const Choices<T> c = choices_from(topologies, comm::average_topology_name);
  return c;
}

const Choices<DType>& precision_choices() {
  static const Choices<DType> c{{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}};
  return c;
}

const Choices<ConvAlgorithm>& conv_algorithm_choices() {
  static const Choices<ConvAlgorithm> c{{"auto", ConvAlgorithm::automatic},
                                        {"direct", ConvAlgorithm::direct}};
  return c;
}

const Choices<MemoryFormat>& memory_format_choices() {
  static const Choices<MemoryFormat> c = choices_from(kMemoryFormats, memory_format_name);
  return c;
}

const Choices<data::TransformPreset>& transform_choices() {
  static const Choices<data::TransformPreset> c{{"imagenet", data::TransformPreset::imagenet},
                                                {"cifar", data::TransformPreset::cifar}};
  return c;
}

const std::string& flag_name(OptimizerKind v) { return name_of(optimizer_choices(), v); }
const std::string& flag_name(OnNonFinite v) { return name_of(on_nonfinite_choices(), v); }
const std::string& flag_name(DatasetKind v) { return name_of(dataset_choices(), v); }
const std::string& flag_name(ScheduleKind v) { return name_of(schedule_choices(), v); }
const std::string& flag_name(BackendKind v) { return name_of(backend_choices(), v); }
const std::string& flag_name(SyncMode v) { return name_of(sync_choices(), v); }
const std::string& flag_name(comm::Algorithm v) { return name_of(algorithm_choices(), v); }
const std::string& flag_name(comm::Launcher v) { return name_of(launcher_choices(), v); }
const std::string& flag_name(comm::GroupTransport v) { return name_of(transport_choices(), v); }
const std::string& flag_name(comm::CommHookKind v) { return name_of(comm_hook_choices(), v); }
const std::string& flag_name(comm::AverageTopology v) { return name_of(fed_topology_choices(), v); }
const std::string& flag_name(DType precision) { return name_of(precision_choices(), precision); }
const std::string& flag_name(ConvAlgorithm v) { return name_of(conv_algorithm_choices(), v); }
const std::string& flag_name(data::TransformPreset v) { return name_of(transform_choices(), v); }

std::string flag_name(const DeviceFlag& d) {
  switch (d.kind) {
    case DeviceFlag::Kind::automatic: return "auto";
    case DeviceFlag::Kind::cpu: return "cpu";
    case DeviceFlag::Kind::cuda: return d.index < 0 ? "cuda" : fmt::format("cuda:{}", d.index);
  }
  return "?";
}

std::string flag_name(const CommThreadCpu& c) {
  switch (c.kind) {
    case CommThreadCpu::Kind::none: return "none";
    case CommThreadCpu::Kind::automatic: return "auto";
    case CommThreadCpu::Kind::cpu: return std::to_string(c.cpu);
  }
  return "?";
}

std::string flag_name(const data::Partition& p) {
  return p.iid() ? "iid" : fmt::format("dirichlet:{:g}", p.dirichlet_alpha);
}

}  // namespace ringflow::apps
