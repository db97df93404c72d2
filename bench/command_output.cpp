#include "ringflow/bench/command_output.h"

#include <cstdio>

#include <fmt/core.h>

namespace ringflow::bench {

std::optional<std::string> command_output(const std::string& command, const std::string& who) {
  std::fflush(stdout);  // what was printed so far comes first
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) {
    fmt::print(stderr, "{}: cannot run: {}\n", who, command);
    return std::nullopt;
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (status != 0) {
    fmt::print(stderr, "{}: `{}` failed (status {}):\n{}\n", who, command, status, out);
    return std::nullopt;
  }
  return out;
}

}  // namespace ringflow::bench
