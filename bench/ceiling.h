// The machine ceiling shared by the benches: GFLOP/s of raw oneDNN dnnl_sgemm on 2048^3
// (row-major, no transposes), measured in the same run as the figures it is compared with.
#pragma once

namespace ringflow::bench {

// Median GFLOP/s over at least `repeat` calls and `min_ms` of timed calls, after `warmup`.
double sgemm_ceiling_gflops(int warmup = 3, int repeat = 10, double min_ms = 300);

}  // namespace ringflow::bench
