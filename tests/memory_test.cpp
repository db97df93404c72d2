// The host caching allocator: after the first training steps, further steps of the same
// shapes are served from the cache and never go back to the system for large blocks (which
// glibc would unmap on free and the kernel would fault in again every step).
#include "ringflow/kernels/cpu/allocator.h"
#include "ringflow/tests/testing.h"

using namespace ringflow;

namespace {
void train_step(const std::vector<Tensor>& p, Generator& gen) {
  Tensor x = randn({32, 8, 32, 32}, &gen);  // 1 MiB input, larger activations
  Tensor target = from_vector(std::vector<double>(32, 3.0), {32}, DType::i64);
  Tensor h = relu(conv2d(x, p[0], p[1], conv2d_params({1, 1}, {1, 1})));
  h = max_pool2d(h, pool2d_params({2, 2}));
  Tensor loss = cross_entropy(linear(flatten(h, 1), p[2]), target);
  loss.backward();
  NoGradGuard no_grad;
  for (const Tensor& t : p) {
    Tensor w = t;
    w.add_(t.grad(), -0.01);
    w.set_grad(Tensor());
  }
}
}  // namespace

TEST_CASE("steady-state training steps allocate no new large blocks") {
  Generator gen(1);
  std::vector<Tensor> p{randn({16, 8, 3, 3}, &gen).requires_grad_(), zeros({16}).requires_grad_(),
                        randn({10, 16 * 16 * 16}, &gen).mul_(0.01).requires_grad_()};
  train_step(p, gen);
  train_step(p, gen);
  const CpuAllocatorStats warm = cpu_allocator_stats();
  CHECK(warm.large_system_allocs > 0);  // the steps do use large blocks
  for (int i = 0; i < 3; ++i) train_step(p, gen);
  const CpuAllocatorStats after = cpu_allocator_stats();
  CHECK(after.large_system_allocs == warm.large_system_allocs);
  CHECK(after.allocated <= warm.allocated);
  cpu_allocator_release_cache();
  CHECK(cpu_allocator_stats().cached == 0);
}

TEST_CASE("with caching off every step goes back to the system for its large blocks") {
  Generator gen(2);
  std::vector<Tensor> p{randn({16, 8, 3, 3}, &gen).requires_grad_(), zeros({16}).requires_grad_(),
                        randn({10, 16 * 16 * 16}, &gen).mul_(0.01).requires_grad_()};
  train_step(p, gen);
  cpu_allocator_set_caching(false);
  CHECK_FALSE(cpu_allocator_caching());
  CHECK(cpu_allocator_stats().cached == 0);  // turning it off released the cache
  const size_t before = cpu_allocator_stats().large_system_allocs;
  train_step(p, gen);
  const size_t per_step = cpu_allocator_stats().large_system_allocs - before;
  CHECK(per_step > 0);
  train_step(p, gen);
  CHECK(cpu_allocator_stats().large_system_allocs - before == 2 * per_step);
  CHECK(cpu_allocator_stats().cached == 0);
  cpu_allocator_set_caching(true);
  CHECK(cpu_allocator_caching());
}
