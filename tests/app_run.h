// Running apps/train as a user runs it, for the tests of the app (apps_test.cpp,
// train_flags_test.cpp): the command line, its exit status and everything it printed.
#pragma once

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

struct Result {
  int status;  // exit code, or -1 when the process did not exit normally (a crash)
  std::string output;
};

inline Result run_command(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

inline Result run_train(const std::string& args) {
  return run_command(std::string(RINGFLOW_TRAIN) + " " + args);
}

// Under `mpiexec -n ranks`, one thread per rank (the ranks inherit the launcher's
// environment on this node, under Hydra and Open MPI's mpirun alike).
inline Result run_train_mpi(int ranks, const std::string& args) {
  return run_command("OMP_NUM_THREADS=1 " + std::string(RINGFLOW_MPIEXEC) + " -n " +
                     std::to_string(ranks) + " " + RINGFLOW_TRAIN + " --threads 1 " + args);
}

inline size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The value after `key` on the line holding it, e.g. the loss of "Iteration [10/10], Loss: ".
inline std::string field(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return "";
  const size_t begin = at + key.size();
  return text.substr(begin, text.find_first_of(" \n", begin) - begin);
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ringflow_apps_test_" + std::to_string(getpid()) + "_" + name)).string();
}
