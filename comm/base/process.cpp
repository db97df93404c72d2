#include "ringflow/comm/base/process.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace ringflow::comm {
namespace {

// The state letter /proc gives pid ('R', 'S', 'D', 'T', 'Z', ...); 0 when the process is
// gone, '?' when it is there but /proc says nothing readable.
char process_state(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return 0;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::unique_ptr<FILE, int (*)(FILE*)> stat(std::fopen(path, "r"), &std::fclose);
  if (!stat) return errno == ENOENT ? 0 : '?';
  char line[512] = {};
  if (!std::fgets(line, sizeof line, stat.get())) return '?';
  const char* close = std::strrchr(line, ')');  // the state follows the command's name
  return close && close[1] == ' ' && close[2] != '\0' ? close[2] : '?';
}

}  // namespace

bool process_alive(int pid) {
  const char state = process_state(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

bool process_stopped(int pid) {
  const char state = process_state(pid);
  return state == 'T' || state == 't';
}

}  // namespace ringflow::comm
