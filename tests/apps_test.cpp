// The demo app run as a user runs it: a short real training run, and bad flags or broken
// data files that must end in a message naming what is wrong and a non-zero exit.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

struct Result {
  int status;  // exit code, or -1 when the process did not exit normally (a crash)
  std::string output;
};

Result run_demo(const std::string& args) {
  const std::string command = std::string(RINGFLOW_DEMO) + " " + args + " 2>&1";
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

}  // namespace

TEST_CASE("demo trains on the real Fashion-MNIST files and reports the test accuracy") {
  const Result r = run_demo("--max-iters 20 --log-every 10 --threads 2");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(contains(r.output, "Iteration [10/20], Loss:"));
  CHECK(contains(r.output, "Iteration [20/20], Loss:"));
  CHECK(contains(r.output, "Test set: Average loss:"));
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
  };
  for (const auto& c : cases) {
    const Result r = run_demo(c.args);
    INFO(c.args, " -> ", r.output);
    CHECK(r.status > 0);
    CHECK(contains(r.output, c.message));
  }
}

TEST_CASE("missing and corrupt dataset files are named with the problem") {
  const Result missing = run_demo("--data-dir /nonexistent/fashion");
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
  const Result corrupt = run_demo("--data-dir " + dir.string());
  fs::remove_all(dir);
  INFO(corrupt.output);
  CHECK(corrupt.status > 0);
  CHECK(contains(corrupt.output, "train-images-idx3-ubyte.gz"));
}
