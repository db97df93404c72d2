#include "ringflow/comm/base/process.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace ringflow::comm {

bool process_alive(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::unique_ptr<FILE, int (*)(FILE*)> stat(std::fopen(path, "r"), &std::fclose);
  if (!stat) return errno != ENOENT;
  char line[512] = {};
  if (!std::fgets(line, sizeof line, stat.get())) return true;
  const char* close = std::strrchr(line, ')');  // the state follows the command's name
  return !(close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X'));
}

}  // namespace ringflow::comm
