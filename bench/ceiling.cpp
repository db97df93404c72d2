#include "ringflow/bench/ceiling.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace ringflow::bench {

double sgemm_ceiling_gflops(int warmup, int repeat, double min_ms) {
  const int64_t n = 2048;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const auto sgemm = [&] { dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n); };
  for (int i = 0; i < warmup; ++i) sgemm();
  std::vector<double> ms;
  double total = 0;
  for (int i = 0; i < repeat || total < min_ms; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    sgemm();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    total += ms.back();
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * n * n * n / 1e9 / (ms[ms.size() / 2] / 1e3);
}

}  // namespace ringflow::bench
