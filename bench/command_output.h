// Runs a helper program (the PyTorch scripts the benchmarks compare against) and hands back
// what it printed, so that each benchmark reads the JSON it wants from it: once per command,
// or from a helper kept running that answers one line per request.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

namespace ringflow::bench {

// The standard output of `command` (run by the shell) when it exits with status 0; nullopt
// otherwise, the command, its status and its output printed to stderr after "`who`: ".
std::optional<std::string> command_output(const std::string& command, const std::string& who);

// `command` (run by the shell) kept running: each request is a line on its standard input,
// read back as lines of its standard output; its standard error is ours. Closing its input
// (the destructor, or a read that finds its output ended) tells it to end; it gets `grace`
// for that, then its process group SIGTERM, and SIGKILL after as long again, saying so: a
// helper that ignores the end of its input cannot keep the caller waiting. The first
// Coprocess makes this process ignore SIGPIPE, so that a helper that died gives an error,
// not our death.
class Coprocess {
 public:
  static constexpr std::chrono::milliseconds kGrace{10000};
  Coprocess(const std::string& command, std::string who, std::chrono::milliseconds grace = kGrace);
  ~Coprocess();
  Coprocess(const Coprocess&) = delete;
  Coprocess& operator=(const Coprocess&) = delete;

  // Writes `line` and a newline; false (the reason on stderr) where the helper has ended.
  bool send(const std::string& line);
  // Its next line of output without the newline, or nullopt where it ended first (its exit
  // status on stderr).
  std::optional<std::string> read_line();

 private:
  std::string command_, who_;
  std::chrono::milliseconds grace_;
  pid_t pid_ = -1;
  FILE* to_ = nullptr;    // its standard input
  FILE* from_ = nullptr;  // its standard output
  int status_ = -1;       // its exit status once reaped
  int finish();           // closes its input, reaps it (signalled past the grace): status_
  bool reaped_within(std::chrono::milliseconds limit);
};

}  // namespace ringflow::bench
