// Runs a helper program (the PyTorch scripts the benchmarks compare against) and hands back
// what it printed, so that each benchmark reads the JSON it wants from it.
#pragma once

#include <optional>
#include <string>

namespace ringflow::bench {

// The standard output of `command` (run by the shell) when it exits with status 0; nullopt
// otherwise, the command, its status and its output printed to stderr after "`who`: ".
std::optional<std::string> command_output(const std::string& command, const std::string& who);

}  // namespace ringflow::bench
