// GroupBootstrap: a Bootstrap over a process group that already exists (its allgather of
// strings), so that a group can be set up from another: NCCL's unique id over an
// MpiProcessGroup or a TransportProcessGroup.
#pragma once

#include "ringflow/comm/base/types.h"
#include "ringflow/comm/bootstrap/bootstrap.h"
#include "ringflow/comm/group/process_group.h"

namespace ringflow::comm {

class GroupBootstrap final : public Bootstrap {
 public:
  // Borrows pg; each allgather must complete within timeout (CommError otherwise).
  GroupBootstrap(ProcessGroup& pg, Timeout timeout) : pg_(pg), timeout_(timeout) {}
  int rank() const override { return pg_.rank(); }
  int size() const override { return pg_.size(); }
  std::vector<std::string> allgather(const std::string& mine) override;

 private:
  ProcessGroup& pg_;
  Timeout timeout_;
};

}  // namespace ringflow::comm
