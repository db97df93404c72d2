// The CPU backend's own elementwise loops (relu, add, relu_backward, dtype conversions) on a
// dense tensor, in GB/s against memcpy of the same bytes split over the same threads, in the
// same run (the machine's memory ceiling for this size). The loops run in the ISA kernels/cpu/loop_isa.h picks; set
// RINGFLOW_CPU_LOOP_ISA=baseline|avx2|avx512 to time a narrower build:
//   for isa in baseline avx2 avx512; do RINGFLOW_CPU_LOOP_ISA=$isa build/bench/eltwise; done
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cpu/loop_isa.h"

namespace {

using namespace ringflow;

struct Buffer {
  std::vector<std::byte> bytes;
  View v;
  Buffer(DType dt, const Shape& shape) : bytes(static_cast<size_t>(numel_of(shape)) * dtype_size(dt)) {
    v.data = bytes.data();
    v.dtype = dt;
    v.shape = shape;
    v.strides = contiguous_strides(shape);
  }
  static int64_t numel_of(const Shape& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
};

// Median ms of `repeat` calls of f after two untimed ones.
double median_ms(int repeat, const std::function<void()>& f) {
  f();
  f();
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringflow's CPU elementwise loops in GB/s against memcpy"};
  std::vector<int64_t> shape{64, 64, 32, 32};
  int repeat = 30, threads = 0;
  app.add_option("--shape", shape, "the tensor's shape")->capture_default_str();
  app.add_option("--repeat", repeat, "timed calls per row (median)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "0: the default")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) set_num_threads(threads);
    const Backend& cpu = cpu_backend();
    const char* isas[] = {"baseline", "avx2", "avx512"};
    fmt::print("threads {}  shape {}  loop ISA {}\n", num_threads(), shape_str(shape),
               isas[static_cast<int>(cpu::loop_isa())]);
    fmt::print("{:<24} {:>9} {:>9} {:>9}\n", "op", "ms", "GB/s", "/memcpy");

    Buffer f32a(DType::f32, shape), f32b(DType::f32, shape), f32c(DType::f32, shape);
    Buffer bfa(DType::bf16, shape), bfb(DType::bf16, shape), bfc(DType::bf16, shape);
    for (View* v : {&f32a.v, &bfa.v}) cpu.fill(*v, 0.5);
    for (View* v : {&f32b.v, &bfb.v}) cpu.fill(*v, -0.25);
    const double n = static_cast<double>(Buffer::numel_of(shape));

    const double memcpy_ms = median_ms(repeat, [&] {
      const size_t bytes = f32a.bytes.size(), parts = static_cast<size_t>(num_threads());
  #pragma omp parallel for num_threads(num_threads())
      for (size_t i = 0; i < parts; ++i) {
        const size_t begin = bytes * i / parts, end = bytes * (i + 1) / parts;
        std::memcpy(f32c.bytes.data() + begin, f32a.bytes.data() + begin, end - begin);
      }
    });
    const double memcpy_gbs = 2 * 4 * n / memcpy_ms / 1e6;
    const auto row = [&](const std::string& name, double bytes, const std::function<void()>& f) {
      const double ms = median_ms(repeat, f), gbs = bytes / ms / 1e6;
      fmt::print("{:<24} {:>9.3f} {:>9.1f} {:>9.2f}\n", name, ms, gbs, gbs / memcpy_gbs);
    };
    fmt::print("{:<24} {:>9.3f} {:>9.1f} {:>9.2f}\n", "memcpy (threads)", memcpy_ms, memcpy_gbs, 1.0);
    for (const auto& [dt, a, b, c] : {std::tuple{"f32", &f32a.v, &f32b.v, &f32c.v}, {"bf16", &bfa.v, &bfb.v, &bfc.v}}) {
      const double size = dtype_size(a->dtype);
      row(fmt::format("relu {}", dt), 2 * size * n, [&] { cpu.unary(UnaryOp::relu, *c, *a); });
      row(fmt::format("add {}", dt), 3 * size * n, [&] { cpu.binary(BinaryOp::add, *c, *a, *b); });
      row(fmt::format("relu_backward {}", dt), 3 * size * n, [&] { cpu.binary(BinaryOp::relu_backward, *c, *a, *b); });
    }
    row("cast f32 -> bf16", 6 * n, [&] { cpu.copy(bfc.v, f32a.v); });
    row("cast bf16 -> f32", 6 * n, [&] { cpu.copy(f32c.v, bfa.v); });
  } catch (const std::exception& e) {
    fmt::print(stderr, "eltwise: {}\n", e.what());
    return 1;
  }
  return 0;
}
