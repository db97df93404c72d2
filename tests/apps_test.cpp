// The training app run as a user runs it: a short real run on Fashion-MNIST, --resume
// continuing bit-identically, and bad flags or broken data files that must end in a
// message naming what is wrong and a non-zero exit.
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

Result run_train(const std::string& args) {
  const std::string command = std::string(RINGFLOW_TRAIN) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
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
  };
  for (const auto& c : cases) {
    const Result r = run_train(c.args);
    INFO(c.args, " -> ", r.output);
    CHECK(r.status > 0);
    CHECK(contains(r.output, c.message));
  }
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
