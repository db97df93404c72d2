// The training app run as a user runs it: a short real run on Fashion-MNIST, --resume
// continuing bit-identically, data-parallel runs under mpiexec (every --sync strategy,
// rank 0 alone printing its table and metrics over every rank, gradient accumulation,
// checkpoints), the --trace files, and bad flags or broken data files that must end in a
// message naming what is wrong and a non-zero exit.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app_run.h"
#include "ringflow/framework/serialize.h"
#include "ringflow/kernels/cuda_devices.h"

TEST_CASE("train: a short run on the real Fashion-MNIST files lowers the loss, in fp32, bf16, fp16") {
  for (const std::string precision : {"fp32", "bf16", "fp16"}) {
    CAPTURE(precision);
    const std::string metrics = temp_path("metrics.jsonl");
    const Result r = run_train("--max-iters 60 --log-every 20 --epochs 1 --precision " + precision +
                               " --metrics " + metrics);
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(contains(r.output, "mixed precision " + precision + " (f32 master weights)") ==
          (precision != "fp32"));
    CHECK(contains(r.output, "fp16 loss scale 65536 after the epoch; 0 steps skipped") ==
          (precision == "fp16"));
    CHECK(contains(r.output, "Epoch [1], Iteration [20/60], Loss:"));
    CHECK(contains(r.output, "ms/iteration over 59 iterations after the first"));
    CHECK(contains(r.output, "Test set: Average loss:"));
    // The metrics file: one line per logged iteration, one per epoch; the loss falls.
    std::ifstream in(metrics);
    std::vector<double> losses;
    std::string line;
    int epochs = 0;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["type"] == "iteration") losses.push_back(j["loss"].get<double>());
      if (j["type"] == "epoch") {
        ++epochs;
        CHECK(j["test_accuracy"].get<double>() > 0.5);
      }
    }
    std::filesystem::remove(metrics);
    REQUIRE(losses.size() == 3);
    CHECK(losses.back() < 0.8 * losses.front());
    CHECK(epochs == 1);
  }
}

// The loss scaler's state travels in the checkpoint's metadata and comes back on --resume.
TEST_CASE("train --precision fp16: the loss scaler's state in the checkpoint, resumed") {
  const std::string ckpt = temp_path("fp16.safetensors");
  const Result first = run_train("--precision fp16 --max-iters 5 --epochs 1 --checkpoint " + ckpt);
  INFO(first.output);
  REQUIRE(first.status == 0);
  std::ifstream in(ckpt, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(contains(bytes, "\"info.amp.scale\":\"65536\""));
  CHECK(contains(bytes, "\"info.amp.skipped_steps\":\"0\""));
  const Result second = run_train("--precision fp16 --max-iters 5 --epochs 2 --resume " + ckpt);
  INFO(second.output);
  CHECK(second.status == 0);
  CHECK(contains(second.output, "Resumed from"));
  CHECK(contains(second.output, "fp16 loss scale 65536 after the epoch"));
  std::filesystem::remove(ckpt);
}

TEST_CASE("train: --resume continues a run bit-identically on one thread") {
  const std::string whole = temp_path("whole.safetensors"), resumed = temp_path("resumed.safetensors");
  // A warm-up epoch makes the learning rate differ between the epochs, so the schedule's
  // position is restored too.
  const std::string common = " --threads 1 --max-iters 8 --log-every 8 --warmup-epochs 1 --schedule none ";
  CHECK(run_train("--epochs 2 --checkpoint " + whole + common).status == 0);
  CHECK(run_train("--epochs 1 --checkpoint " + resumed + common).status == 0);
  const Result r = run_train("--epochs 2 --resume " + resumed + " --checkpoint " + resumed + common);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(contains(r.output, "Resumed from"));
  const ringflow::SafetensorsFile a = ringflow::load_safetensors(whole);
  const ringflow::SafetensorsFile b = ringflow::load_safetensors(resumed);
  CHECK(a.metadata == b.metadata);
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    INFO(name);
    REQUIRE(b.tensors.count(name) == 1);
    CHECK(t.to_vector<double>() == b.tensors.at(name).to_vector<double>());
  }
  // Resuming a checkpoint of another model is refused, naming both.
  const Result other = run_train("--model mlp --epochs 3 --resume " + resumed);
  CHECK(other.status > 0);
  CHECK(contains(other.output, resumed));
  std::filesystem::remove(whole);
  std::filesystem::remove(resumed);
}

TEST_CASE("train under mpiexec -n 2: every strategy, one printer, the same training") {
  // The same global batch of 64 each way: the strategies differ only in how the gradients
  // are averaged, so the losses agree to the printed digits.
  const std::string metrics = temp_path("mpi_metrics.jsonl");
  const std::string common = " --model mlp --epochs 1 --max-iters 10 --log-every 5 --metrics " + metrics;
  std::vector<std::string> losses;
  for (const std::string sync : {"gather-scatter --local-batch 32", "allreduce --algo ring",
                                 "allreduce --algo tree", "ddp --bucket-cap-mb 0.1",
                                 "ddp --grad-accum 2 --global-batch 64"}) {
    std::filesystem::remove(metrics);
    const Result r = run_train_mpi(2, "--sync " + sync + common);
    INFO(sync, " -> ", r.output);
    CHECK(r.status == 0);
    CHECK(count(r.output, "Epoch [1], Iteration [10/10], Loss:") == 1);  // rank 0 alone
    CHECK(count(r.output, "Test set: Average loss:") == 1);
    // The epoch's table: mean and max over the ranks.
    CHECK(contains(r.output, "per iteration, 2 ranks"));
    for (const char* row : {"data wait", "forward", "backward compute", "comm wait (exposed)",
                            "optimizer", "comm total (comm thread)", "comm thread cpu", "sent",
                            "received", "overlap (1 - exposed/total)"})
      CHECK(count(r.output, std::string("\n  ") + row + " ") == 1);
    losses.push_back(field(r.output, "Iteration [10/10], Loss: "));
    // The metrics: the iteration lines carry every rank's figures too (mean and max).
    std::ifstream in(metrics);
    std::string line;
    int iterations = 0, epochs = 0;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["type"] == "header") continue;  // train_flags_test checks it
      CHECK(j["ranks"] == 2);
      for (const char* key : {"data_ms", "forward_ms", "backward_ms", "comm_ms", "optimizer_ms",
                              "comm_total_ms", "comm_cpu_ms", "bytes_sent", "bytes_received",
                              "overlap"}) {
        CAPTURE(key);
        REQUIRE(j.contains(key));
        REQUIRE(j.contains(std::string("max_") + key));
        CHECK(j[std::string("max_") + key].get<double>() >= j[key].get<double>() * (1 - 1e-12));
      }
      CHECK(j["bytes_sent"].get<double>() > 0);
      CHECK(j["comm_cpu_ms"].get<double>() > 0);  // the communication thread's CPU clock, read
      const std::string step = j["type"] == "epoch" ? "ms_per_iteration" : "step_ms";
      CHECK(j["max_" + step].get<double>() >= j[step].get<double>() * (1 - 1e-12));
      iterations += j["type"] == "iteration";
      epochs += j["type"] == "epoch";
    }
    CHECK(iterations == 2);
    CHECK(epochs == 1);
  }
  std::filesystem::remove(metrics);
  CHECK(losses.front().size() == 6);  // "2.0353"
  for (const std::string& l : losses) CHECK(l == losses.front());
}

TEST_CASE("train --bucket-cap-mb auto: the tuner's trials and choice, logged once by rank 0") {
  const std::string metrics = temp_path("tuning.jsonl");
  std::filesystem::remove(metrics);
  const Result r = run_train_mpi(2, "--sync ddp --bucket-cap-mb auto --model mlp --epochs 1 "
                                    "--max-iters 32 --log-every 32 --eval-every 0 --metrics " + metrics);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(contains(r.output, "buckets of a measured cap (--bucket-cap-mb auto)"));
  CHECK(count(r.output, "ddp: bucket caps measured") == 1);
  std::ifstream in(metrics);
  std::string line;
  int records = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] != "bucket_tuning") continue;
    ++records;
    CHECK(j["tried"].size() >= 6);  // the six caps, and the winner without its first bucket
    CHECK(j["global_iteration"].get<int>() <= 32);
    double best = 1e300;
    for (const auto& t : j["tried"]) best = std::min(best, t["backward_ms"].get<double>());
    bool chosen_is_best = false;
    for (const auto& t : j["tried"])
      chosen_is_best |= t["backward_ms"].get<double>() == best && t["cap_mb"] == j["chosen"]["cap_mb"] &&
                        t["first_mb"] == j["chosen"]["first_mb"];
    CHECK(chosen_is_best);
  }
  CHECK(records == 1);
  std::filesystem::remove(metrics);
}

TEST_CASE("train under mpiexec: checkpoints by rank 0, resumed by every rank and by one") {
  const std::string ckpt = temp_path("ddp.safetensors");
  const std::string common = " --model mlp --max-iters 4 --log-every 4 --checkpoint " + ckpt;
  CHECK(run_train_mpi(2, "--sync ddp --epochs 1" + common).status == 0);
  const Result again = run_train_mpi(2, "--sync ddp --epochs 2 --resume " + ckpt + common);
  INFO(again.output);
  CHECK(again.status == 0);
  CHECK(count(again.output, "Resumed from") == 1);
  const Result alone = run_train("--threads 1 --epochs 3 --resume " + ckpt + common);
  CHECK(alone.status == 0);
  CHECK(contains(alone.output, "after epoch 2"));
  std::filesystem::remove(ckpt);
}

TEST_CASE("bad flags name the flag and the problem") {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"--batch-size -3", "--batch-size: must be > 0, got -3"},
      {"--lr abc", "--lr: not a number: abc"},
      {"--epochs 0", "--epochs: must be > 0, got 0"},
      {"--threads -1", "--threads: must be >= 0, got -1"},
      {"--momentum 1.5", "--momentum"},
      {"--no-such-flag", "--no-such-flag"},
      {"--batch-size 100000", "--batch-size 100000 exceeds the 60000 training images"},
      {"--model bogus", "--model: bogus not in {"},
      {"--dataset imagenet", "--dataset: imagenet not in {fashion-mnist,cifar10,synthetic,imagefolder,shards}"},
      {"--model resnet18_cifar", "takes images of shape (3, 32, 32), but the training set of --dataset fashion-mnist has (1, 28, 28)"},
      {"--checkpoint /nonexistent/dir/c.safetensors", "--checkpoint /nonexistent/dir/c.safetensors: the folder /nonexistent/dir does not exist"},
      {"--metrics /nonexistent/m.json", "--metrics /nonexistent/m.json: the folder /nonexistent does not exist"},
      {"--threads 100000", "--threads: 100000 threads are too many: at most"},
      {"--workers 100000", "--workers: 100000 workers are too many: at most"},
      {"--global-batch 1000000000", "--global-batch 1000000000 exceeds the 60000 training images"},
      {"--resume /nonexistent/ckpt.safetensors", "/nonexistent/ckpt.safetensors"},
      {"--sync bogus", "--sync: bogus not in {"},
      {"--global-batch 64 --batch-size 32", "excludes"},
      {"--global-batch 63 --grad-accum 2", "--global-batch 63 is not a multiple of 1 ranks x --grad-accum 2"},
      {"--device bogus", "--device bogus: expected cpu, cuda, cuda:N or auto"},
      {"--device cuda:x", "--device cuda:x: expected cpu, cuda, cuda:N or auto"},
      {"--device cuda:-1", "--device cuda:-1: expected cpu, cuda, cuda:N or auto"},
      {"--device cpu --backend nccl", "--backend nccl: NCCL reduces GPU tensors, but this rank trains on cpu"},
      {"--backend gloo", "--backend: gloo not in {auto,mpi,nccl}"},
      {"--precision fp8", "--precision: fp8 not in {"},
      {"--local-steps 2", "--local-steps applies to --sync fedavg"},
      {"--sync fedavg --partition dirichlet:-1", "dirichlet:ALPHA"},
      {"--bucket-cap-mb fast", "--bucket-cap-mb: 'fast' is neither a number >= 0 nor auto"},
      {"--bucket-cap-mb -1", "--bucket-cap-mb: '-1' is neither a number >= 0 nor auto"},
      {"--comm-hook fp16", "--comm-hook fp16 applies to --sync ddp, not --sync none"},
      {"--sync allreduce --comm-hook fp16", "--comm-hook fp16 applies to --sync ddp, not --sync allreduce"},
      {"--sync gather-scatter --comm-hook noop", "--comm-hook noop applies to --sync ddp and allreduce"},
      {"--comm-thread-cpu 1.5", "--comm-thread-cpu: expected auto, none or a CPU number, got '1.5'"},
      // ~100 MiB per 224x224 image: more than any host has, refused before the first step.
      {"--model resnet50 --dataset synthetic --batch-size 10000",
       "--batch-size 10000: a training step of resnet50 needs up to about"},
  };
  for (const auto& c : cases) {
    const Result r = run_train(c.args);
    INFO(c.args, " -> ", r.output);
    CHECK(r.status > 0);
    CHECK(contains(r.output, c.message));
  }
}

TEST_CASE("--sync none under mpiexec -n 2 is refused on every rank") {
  const Result r = run_train_mpi(2, "--max-iters 1");
  CHECK(r.status > 0);
  CHECK(count(r.output, "--sync none trains one process, but the launcher started 2") == 2);
}

TEST_CASE("missing and corrupt dataset files are named with the problem") {
  const Result missing = run_train("--data-dir /nonexistent/fashion");
  CHECK(missing.status > 0);
  CHECK(contains(missing.output, "/nonexistent/fashion/train-images-idx3-ubyte.gz"));

  // A training-images file that is not gzip nor IDX: the reader must say which file.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ringflow_apps_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "train-images-idx3-ubyte.gz") << "this is not an IDX file";
  for (const char* name : {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"})
    fs::copy_file(fs::path("/usr/share/datasets/fashion-mnist") / name, dir / name);
  const Result corrupt = run_train("--data-dir " + dir.string());
  INFO(corrupt.output);
  CHECK(corrupt.status > 0);
  CHECK(contains(corrupt.output, "train-images-idx3-ubyte.gz"));

  // Test sets checked when opened, before any training: images of another shape; none.
  fs::copy_file(fs::path("/usr/share/datasets/fashion-mnist") / "train-images-idx3-ubyte.gz",
                dir / "train-images-idx3-ubyte.gz", fs::copy_options::overwrite_existing);
  auto write_idx = [&](const char* name, std::vector<uint8_t> dims, size_t payload) {
    std::ofstream out(dir / name, std::ios::binary);  // plain IDX: the reader takes both
    const uint8_t magic[4] = {0, 0, 8, static_cast<uint8_t>(dims.size() / 4)};
    out.write(reinterpret_cast<const char*>(magic), 4);
    out.write(reinterpret_cast<const char*>(dims.data()), static_cast<std::streamsize>(dims.size()));
    out << std::string(payload, '\1');
  };
  write_idx("t10k-images-idx3-ubyte.gz", {0, 0, 0, 2, 0, 0, 0, 32, 0, 0, 0, 32}, 2 * 32 * 32);
  write_idx("t10k-labels-idx1-ubyte.gz", {0, 0, 0, 2}, 2);
  const Result shape = run_train("--data-dir " + dir.string());
  CHECK(shape.status > 0);
  CHECK(contains(shape.output, "but the test set of --dataset fashion-mnist (--data-dir"));
  CHECK(!contains(shape.output, "Epoch ["));  // refused before training
  write_idx("t10k-images-idx3-ubyte.gz", {0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0, 28}, 0);
  write_idx("t10k-labels-idx1-ubyte.gz", {0, 0, 0, 0}, 0);
  const Result empty = run_train("--data-dir " + dir.string());
  fs::remove_all(dir);
  CHECK(empty.status > 0);
  CHECK(contains(empty.output, "the test set of --dataset fashion-mnist (--data-dir"));
  CHECK(contains(empty.output, "is empty"));
}

namespace {

// A complete event ("ph": "X") of a --trace file.
struct Span {
  std::string name, cat;
  int pid, tid;
  double begin, end;  // us
  nlohmann::json args;
};

std::vector<Span> read_trace(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);  // throws on invalid JSON
  REQUIRE(j.contains("traceEvents"));
  REQUIRE(j["traceEvents"].is_array());
  std::vector<Span> spans;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const double ts = e["ts"].get<double>();
    spans.push_back({e["name"].get<std::string>(), e["cat"].get<std::string>(), e["pid"].get<int>(),
                     e["tid"].get<int>(), ts, ts + e["dur"].get<double>(),
                     e.value("args", nlohmann::json::object())});
  }
  return spans;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Checks the spans of one rank's trace: `iterations` iteration spans on the compute track
// (tid 1), each holding a data wait, a forward, a backward, a comm wait (when
// `comm_spans_per_iteration` > 0) and an optimizer span, and that many spans on the comm
// track (tid 2), named "allreduce " + a name in `comm_names`; every span of an iteration
// lies inside it. Returns the comm spans.
std::vector<Span> check_trace(const std::string& path, int pid, int iterations,
                              size_t comm_spans_per_iteration) {
  INFO(path);
  const std::vector<Span> spans = read_trace(path);
  std::vector<Span> iteration_spans, comm;
  for (const Span& s : spans) {
    CHECK(s.pid == pid);
    CHECK(s.end >= s.begin);
    if (s.name == "iteration") iteration_spans.push_back(s);
    if (s.tid == 2) comm.push_back(s);
  }
  REQUIRE(iteration_spans.size() == static_cast<size_t>(iterations));
  CHECK(comm.size() == comm_spans_per_iteration * iterations);
  constexpr double kSlack = 0.01;  // us: the file rounds to whole nanoseconds
  for (const Span& it : iteration_spans) {
    CAPTURE(it.args.dump());
    CHECK(it.tid == 1);
    std::map<std::string, int> inside;
    size_t comm_inside = 0;
    for (const Span& s : spans) {
      if (s.cat == "iteration" || s.cat == "epoch") continue;
      if (s.begin >= it.begin - kSlack && s.end <= it.end + kSlack) {
        ++inside[s.name];
        if (s.tid == 2) ++comm_inside;
      } else {
        // Not in this iteration: entirely outside it, so in another one.
        CHECK((s.end <= it.begin + kSlack || s.begin >= it.end - kSlack));
      }
    }
    CHECK(inside["data wait"] == 1);
    CHECK(inside["forward"] == 1);
    CHECK(inside["backward"] == 1);
    CHECK(inside["optimizer"] == 1);
    CHECK(inside["comm wait"] == (comm_spans_per_iteration > 0 ? 1 : 0));
    CHECK(comm_inside == comm_spans_per_iteration);
  }
  // Every span but the epoch's lies in some iteration (the loop above checked each one
  // against every iteration: inside it or outside it).
  for (const Span& s : spans) {
    if (s.cat == "iteration" || s.cat == "epoch") continue;
    size_t holders = 0;
    for (const Span& it : iteration_spans)
      holders += s.begin >= it.begin - kSlack && s.end <= it.end + kSlack;
    CHECK(holders == 1);
  }
  return comm;
}

}  // namespace

TEST_CASE("train --trace: a Chrome trace per rank, compute and communication spans per iteration") {
  constexpr int kIters = 3;
  const std::string common = " --model mlp --dataset synthetic --epochs 1 --max-iters 3 ";
  SUBCASE("ddp on 2 ranks: one file per rank, a span per bucket and iteration") {
    const std::string path = temp_path("trace.json");
    // 0.25 MiB buckets, in the order the gradients come (each layer's weight, then its
    // bias): fc3's and fc2's (0.14 MB), fc1.weight (0.8 MB) alone, fc1.bias.
    const Result r = run_train_mpi(2, "--sync ddp --bucket-cap-mb 0.25 --trace " + path + common);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK_FALSE(std::filesystem::exists(path));  // the rank goes before the extension
    for (int rank = 0; rank < 2; ++rank) {
      const std::string file = temp_path("trace.rank" + std::to_string(rank) + ".json");
      REQUIRE(std::filesystem::exists(file));
      const std::vector<Span> comm = check_trace(file, rank, kIters, /*buckets=*/3);
      std::map<int, int> per_bucket;
      for (const Span& s : comm) {
        CHECK(starts_with(s.name, "allreduce bucket "));
        ++per_bucket[s.args["index"].get<int>()];
        CHECK(s.args["bytes"].get<int64_t>() > 0);
        CHECK(s.args["sent"].get<int64_t>() == s.args["bytes"].get<int64_t>());  // 2 ranks
      }
      CHECK(per_bucket == std::map<int, int>{{0, kIters}, {1, kIters}, {2, kIters}});
      std::filesystem::remove(file);
    }
  }
  SUBCASE("allreduce on 2 ranks: a span per gradient") {
    const std::string path = temp_path("allreduce.json");
    const Result r = run_train_mpi(2, "--sync allreduce --algo ring --trace " + path + common);
    INFO(r.output);
    REQUIRE(r.status == 0);
    for (int rank = 0; rank < 2; ++rank) {
      const std::string file = temp_path("allreduce.rank" + std::to_string(rank) + ".json");
      const std::vector<Span> comm = check_trace(file, rank, kIters, /*parameters=*/6);
      CHECK(comm.front().name == "allreduce fc1.weight");
      std::filesystem::remove(file);
    }
  }
  SUBCASE("one process: the file as named, no communication") {
    const std::string path = temp_path("alone.json");
    const Result r = run_train("--threads 1 --trace " + path + common);
    INFO(r.output);
    REQUIRE(r.status == 0);
    check_trace(path, 0, kIters, 0);
    std::filesystem::remove(path);
  }
  SUBCASE("an unwritable path is named") {
    const Result r = run_train("--threads 1 --trace /nonexistent/dir/t.json" + common);
    CHECK(r.status > 0);
    CHECK(contains(r.output, "--trace /nonexistent/dir/t.json: the folder /nonexistent/dir does not exist"));
  }
}

TEST_CASE("--device and --backend: listed in --help; a GPU that is not there is one clear line") {
  const Result help = run_train("--help");
  CHECK(help.status == 0);
  CHECK(contains(help.output, "--device"));
  CHECK(contains(help.output, "--backend"));
  std::string why;
  if (ringflow::cuda_device_count(&why) > 0) {
    MESSAGE("SKIP the no-GPU checks: this machine has a CUDA device");
    return;
  }
  for (const char* device : {"cuda", "cuda:0", "cuda:3"}) {
    const Result r = run_train(std::string("--device ") + device);
    INFO(device, " -> ", r.output);
    CHECK(r.status == 1);
    CHECK(count(r.output, "\n") == 1);  // one line, before any data is loaded
    CHECK(contains(r.output, std::string("train: --device ") + device + ": no usable CUDA device ("));
  }
  {  // under mpiexec: refused on every rank before the process group is made
    const Result r = run_train_mpi(2, "--sync ddp --device cuda --max-iters 1");
    INFO(r.output);
    CHECK(r.status > 0);
    CHECK(count(r.output, "train: --device cuda: no usable CUDA device (") == 2);
  }
  {  // NCCL needs the GPU that auto did not find
    const Result r = run_train("--device auto --backend nccl");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(count(r.output, "\n") == 1);
    CHECK(contains(r.output, "train: --backend nccl: NCCL reduces GPU tensors, but this rank "
                             "trains on cpu (--device auto: no usable GPU: "));
  }
  // auto trains on the CPU and says why.
  const Result r = run_train("--device auto --max-iters 5 --log-every 5 --epochs 1 --eval-every 0");
  CHECK(r.status == 0);
  CHECK(contains(r.output, "device cpu (auto: no usable GPU: "));
  CHECK(contains(r.output, "Epoch [1], Iteration [5/5], Loss: "));
}
