// Data-parallel training with ringflow: every rank holds the model, trains on its share of
// Fashion-MNIST (DistributedSampler), and DistributedDataParallel averages the gradients in
// buckets while backward runs, so the replicas stay equal. The ranks come from mpiexec, or
// from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): launch_group
// picks the process group the launcher calls for.
//
//   make && mpiexec -n 2 ./data_parallel [steps]
//   for r in 0 1; do RANK=$r WORLD_SIZE=2 ./data_parallel & done; wait
#include <ringflow/comm/ddp/ddp.h>
#include <ringflow/comm/group/launch_group.h>
#include <ringflow/framework/ringflow.h>
#include <ringflow/models/registry.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

using namespace ringflow;

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 100;
  const comm::LaunchedGroup launched = comm::launch_group({});
  comm::ProcessGroup& pg = *launched.group;
  const int rank = pg.rank(), world = pg.size();

  manual_seed(0);  // the same initial model on every rank (DDP checks, and broadcasts rank 0's)
  nn::ModulePtr model = models::make_model("small_cnn");
  comm::DistributedDataParallel ddp(model, launched.group);

  auto train_set = data::Mnist::open(data::kFashionMnistDir, /*train=*/true);
  auto sampler = std::make_shared<data::DistributedSampler>(train_set->size(), world, rank);
  const auto norm = std::make_shared<data::Normalize>(std::vector<float>{0.2860f},
                                                      std::vector<float>{0.3530f});
  data::DataLoader train(train_set, {.batch_size = 32, .drop_last = true,
                                     .transforms = {norm}, .sampler = sampler});
  optim::SGD sgd(model->parameters(), {.lr = 0.02, .momentum = 0.9});

  train.start_epoch(0);
  data::Batch batch;
  for (int64_t step = 1; step <= steps && train.next(batch); ++step) {
    Tensor loss = cross_entropy(ddp(batch.images), batch.labels);
    loss.backward();  // each bucket's allreduce starts as soon as its gradients are ready
    sgd.step();
    sgd.zero_grad();  // the next backward computes the gradients into DDP's buckets
    if (rank == 0 && step % 20 == 0) {
      std::printf("step %lld: loss %.4f (rank 0's batch)\n", static_cast<long long>(step),
                  loss.item());
    }
  }

  // The replicas must be equal: every rank's parameter checksum, gathered and compared.
  double checksum = 0;
  for (const Tensor& p : model->parameters()) checksum += sum(p).item();
  Tensor mine = full({1}, checksum, DType::f64), all = zeros({world}, DType::f64);
  pg.allgather(all, mine)->wait();
  const std::vector<double> sums = all.to_vector<double>();
  bool equal = true;
  for (double s : sums) equal = equal && s == sums[0];
  if (rank == 0) {
    std::printf("%d ranks started by %s, our algorithms over %s; replicas %s (checksum %.6f)\n",
                world, launched.how.c_str(), launched.transport.c_str(),
                equal ? "identical" : "DIFFER", sums[0]);
  }
  return equal ? 0 : 1;
}
