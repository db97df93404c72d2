// Federated averaging's collective (FedAvg, McMahan et al. 2017): every rank's model replaced
// by the average of all ranks' models, each weighted by the samples it trained on since the
// last average. Parameters and floating-point buffers (batch norm's running statistics) are
// averaged; integer buffers and the optimizer's state stay each rank's own, as in FedAvg.
#pragma once

#include <cstdint>
#include <string>

#include "ringflow/comm/group/comm_event.h"
#include "ringflow/comm/group/process_group.h"
#include "ringflow/framework/nn/module.h"

namespace ringflow::comm {

// cloud: every model to rank 0 and the average back, as a federated server does (our naive
// allreduce; over NCCL its reduce and broadcast); allreduce: the group's allreduce (--algo).
enum class AverageTopology : uint8_t { cloud, allreduce };
const char* average_topology_name(AverageTopology topology);

struct ModelAverageOptions {
  AverageTopology topology = AverageTopology::allreduce;
  Algorithm algorithm = Algorithm::automatic;  // the allreduce topology's
  DType wire = DType::f32;                     // what the models travel as: f32, f16 or bf16
  Timeout timeout = kDefaultTimeout;
};

// Collective: every rank calls it with its own sample count (>= 0; if every rank passes 0,
// a plain mean). The models travel as one flat buffer of options.wire, each rank's scaled by
// its weight, so one summing collective leaves the weighted average. Returns the round as
// one event (name "model"): the bytes counted by the transport beside the closed form.
CommEvent average_model(nn::Module& model, ProcessGroup& pg, double samples,
                        const ModelAverageOptions& options);

}  // namespace ringflow::comm
