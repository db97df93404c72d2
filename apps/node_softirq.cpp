#include "ringflow/apps/node_softirq.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace ringflow::apps {

std::optional<std::chrono::nanoseconds> softirq_time_from_proc_stat(std::string_view text,
                                                                    long ticks_per_second) {
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    // user nice system idle iowait irq softirq
    long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
    if (!(fields >> name) || name != "cpu") continue;
    if (!(fields >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) return std::nullopt;
    if (ticks_per_second <= 0) return std::nullopt;
    return std::chrono::nanoseconds(softirq * (1'000'000'000LL / ticks_per_second));
  }
  return std::nullopt;
}

std::chrono::nanoseconds node_softirq_time() {
  std::ifstream in("/proc/stat");
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return softirq_time_from_proc_stat(text.str(), sysconf(_SC_CLK_TCK)).value_or(std::chrono::nanoseconds{});
}

}  // namespace ringflow::apps
