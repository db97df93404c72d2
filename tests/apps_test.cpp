// The training app run as a user runs it: a short real run on Fashion-MNIST, --resume
// continuing bit-identically, data-parallel runs under mpiexec (every --sync strategy,
// rank 0 alone printing, gradient accumulation, checkpoints), and bad flags or broken data
// files that must end in a message naming what is wrong and a non-zero exit.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/serialize.h"

namespace {

struct Result {
  int status;  // exit code, or -1 when the process did not exit normally (a crash)
  std::string output;
};

Result run_command(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

Result run_train(const std::string& args) {
  return run_command(std::string(RINGFLOW_TRAIN) + " " + args);
}

// Under `mpiexec -n ranks`, one thread per rank.
Result run_train_mpi(int ranks, const std::string& args) {
  return run_command(std::string(RINGFLOW_MPIEXEC) + " -n " + std::to_string(ranks) +
                     " -genv OMP_NUM_THREADS 1 " + RINGFLOW_TRAIN + " --threads 1 " + args);
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The value after `key` on the line holding it, e.g. the loss of "Iteration [10/10], Loss: ".
std::string field(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size();
  return text.substr(begin, text.find_first_of(" \n", begin) - begin);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ringflow_apps_test_" + std::to_string(getpid()) + "_" + name)).string();
}

}  // namespace

TEST_CASE("train: a short run on the real Fashion-MNIST files lowers the loss") {
  const std::string metrics = temp_path("metrics.jsonl");
  const Result r = run_train("--max-iters 60 --log-every 20 --epochs 1 --metrics " + metrics);
  INFO(r.output);
  CHECK(r.status == 0);
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
  const std::string common = " --model mlp --epochs 1 --max-iters 10 --log-every 10 ";
  std::vector<std::string> losses;
  for (const std::string sync : {"gather-scatter --local-batch 32", "allreduce --algo ring",
                                 "allreduce --algo tree", "ddp --bucket-cap-mb 0.1",
                                 "ddp --grad-accum 2 --global-batch 64"}) {
    const Result r = run_train_mpi(2, "--sync " + sync + common);
    INFO(sync, " -> ", r.output);
    CHECK(r.status == 0);
    CHECK(count(r.output, "Epoch [1], Iteration [10/10], Loss:") == 1);  // rank 0 alone
    CHECK(count(r.output, "Test set: Average loss:") == 1);
    CHECK(contains(r.output, "Communication per iteration and rank:"));
    losses.push_back(field(r.output, "Iteration [10/10], Loss: "));
  }
  CHECK(losses.front().size() == 6);  // "2.0353"
  for (const std::string& l : losses) CHECK(l == losses.front());
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
      {"--dataset imagenet", "--dataset: imagenet not in {fashion-mnist,cifar10,synthetic}"},
      {"--model resnet18_cifar", "takes images of shape (3, 32, 32), but --dataset fashion-mnist has (1, 28, 28)"},
      {"--resume /nonexistent/ckpt.safetensors", "/nonexistent/ckpt.safetensors"},
      {"--sync bogus", "--sync: bogus not in {"},
      {"--global-batch 64 --batch-size 32", "excludes"},
      {"--global-batch 63 --grad-accum 2", "--global-batch 63 is not a multiple of 1 ranks x --grad-accum 2"},
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
  fs::remove_all(dir);
  INFO(corrupt.output);
  CHECK(corrupt.status > 0);
  CHECK(contains(corrupt.output, "train-images-idx3-ubyte.gz"));
}
