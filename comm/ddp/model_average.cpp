#include "ringflow/comm/ddp/model_average.h"

#include <memory>
#include <stdexcept>
#include <vector>

#include "ringflow/framework/autograd.h"
#include "ringflow/framework/error.h"
#include "ringflow/framework/ops.h"

namespace ringflow::comm {
namespace {

using Clock = std::chrono::steady_clock;

// The tensors that are averaged, in the same order on every rank.
std::vector<Tensor> averaged_state(const nn::Module& model) {
  std::vector<Tensor> state = model.parameters();
  for (const auto& [name, b] : model.named_buffers()) {
    if (is_floating(b.dtype())) state.push_back(b);
  }
  return state;
}

// Every rank's weight: samples over the group's total (one small allreduce).
double weight_of(ProcessGroup& pg, double samples, const CollectiveOptions& base, CommEvent& e) {
  Tensor total = from_vector({samples}, {1}, DType::f64);
  CollectiveOptions o = base;
  o.op = ReduceOp::sum;
  o.algorithm = Algorithm::automatic;
  const auto work = pg.allreduce(total, o);
  work->wait();
  e.add(*work);
  e.model += pg.allreduce_traffic_model(1, DType::f64, o.algorithm);
  const double sum = total.item();
  return sum > 0 ? samples / sum : 1.0 / pg.size();
}

}  // namespace

const char* average_topology_name(AverageTopology topology) {
  return topology == AverageTopology::cloud ? "cloud" : "allreduce";
}

CommEvent average_model(nn::Module& model, ProcessGroup& pg, double samples,
                        const ModelAverageOptions& options) {
  RF_CHECK(samples >= 0, "average_model: negative sample count ", samples);
  RF_CHECK(is_floating(options.wire) && options.wire != DType::f64,
           "average_model: the models travel as f32, f16 or bf16, not ", dtype_name(options.wire));
  CommEvent e;
  e.name = "model";
  e.ready = e.launched = Clock::now();
  if (pg.size() == 1) return e;
  NoGradGuard no_grad;
  CollectiveOptions o;
  o.timeout = options.timeout;
  const double weight = weight_of(pg, samples, o, e);

  const std::vector<Tensor> state = averaged_state(model);
  int64_t count = 0;
  for (const Tensor& t : state) count += t.numel();
  Tensor flat = empty({count}, options.wire, state.empty() ? Device::cpu() : state[0].device());
  int64_t offset = 0;
  for (const Tensor& t : state) {
    flat.narrow(0, offset, t.numel()).view(t.shape()).copy_(mul(t, weight));
    offset += t.numel();
  }
  e.bytes = count * static_cast<int64_t>(dtype_size(options.wire));

  o.op = ReduceOp::sum;
  std::vector<std::shared_ptr<Work>> works;
  if (options.topology == AverageTopology::allreduce) {
    o.algorithm = options.algorithm;
    works = {pg.allreduce(flat, o)};
    e.model += pg.allreduce_traffic_model(count, options.wire, o.algorithm);
  } else if (pg.runs_our_algorithms()) {
    e.collective = "allreduce (cloud)";
    o.algorithm = Algorithm::naive;  // to rank 0 and back
    works = {pg.allreduce(flat, o)};
    e.model += pg.allreduce_traffic_model(count, options.wire, o.algorithm);
  } else {  // NCCL runs none of ours: its reduce to rank 0 and broadcast back
    e.collective = "reduce+broadcast";
    works = {pg.reduce(flat, o), pg.broadcast(flat, o)};
    e.model += reduce_broadcast_traffic(e.bytes, pg.size(), pg.rank(), 0);
  }
  for (const auto& w : works) {
    w->wait();
    e.add(*w);
  }
  offset = 0;
  for (const Tensor& t : state) {
    Tensor dst = t;  // a handle to the parameter itself
    dst.copy_(flat.narrow(0, offset, t.numel()).view(t.shape()));
    offset += t.numel();
  }
  return e;
}

}  // namespace ringflow::comm
