#include "ringflow/comm/group/group_bootstrap.h"

#include "ringflow/comm/group/device_choice.h"

namespace ringflow::comm {

std::vector<std::string> GroupBootstrap::allgather(const std::string& mine) {
  return allgather_strings(pg_, mine, timeout_);
}

}  // namespace ringflow::comm
