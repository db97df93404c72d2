// The CUDA backend (memory, copy, fill) and copy_between_devices against the reference
// backend run on the host: same views, same dtype conversions, compared bit for bit.
// Without a device (no GPU, stub driver, or a build without CUDA) the device tests are
// skipped by doctest and a listener prints each one's name with the reason; the table test
// always runs and checks what a build without a device must still do.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda_copy.h"
#include "ringflow/kernels/cuda_devices.h"
#include "ringflow/kernels/cuda_memory.h"
#include "ringflow/tests/cuda_skip.h"

namespace ringflow {
namespace {

const DType kAllDtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32,
                            DType::i64};

// Elements a view reaches: max offset + 1.
int64_t span(const Shape& shape, const Shape& strides) {
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
  return last + 1;
}

View make_view(void* data, DType dtype, const Shape& shape, Shape strides = {}) {
  View v;
  v.data = data;
  v.dtype = dtype;
  v.shape = shape;
  v.strides = strides.empty() ? contiguous_strides(shape) : strides;
  return v;
}

// `elements` slots of `dtype` on the host.
struct HostBuf {
  DType dtype;
  int64_t elements;
  std::vector<unsigned char> mem;
  HostBuf(DType dt, int64_t n) : dtype(dt), elements(n), mem(n * dtype_size(dt)) {}
  View flat() { return make_view(mem.data(), dtype, {elements}); }
  View view(const Shape& shape, const Shape& strides = {}) {
    return make_view(mem.data(), dtype, shape, strides);
  }
};

// The same on the current CUDA device, through the backend's allocator.
struct DeviceBuf {
  DType dtype;
  int64_t elements;
  void* data;
  DeviceBuf(DType dt, int64_t n)
      : dtype(dt), elements(n), data(cuda_backend()->allocate(n * dtype_size(dt))) {}
  ~DeviceBuf() { cuda_backend()->deallocate(data, elements * dtype_size(dtype)); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  View flat() const { return make_view(data, dtype, {elements}); }
  View view(const Shape& shape, const Shape& strides = {}) const {
    return make_view(data, dtype, shape, strides);
  }
};

void upload(const DeviceBuf& dst, HostBuf& src) {
  copy_between_devices(dst.flat(), Device::cuda(), src.flat(), Device::cpu());
}

HostBuf download(const DeviceBuf& src) {
  HostBuf out(src.dtype, src.elements);
  copy_between_devices(out.flat(), Device::cpu(), src.flat(), Device::cuda());
  return out;
}

// Host buffer of `dtype` holding value(i) at slot i (converted by the reference copy).
template <class Fn>
HostBuf host_values(DType dtype, int64_t n, Fn value) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value(i);
  HostBuf out(dtype, n);
  reference_backend().copy(out.flat(), make_view(v.data(), DType::f64, {n}));
  return out;
}

// Index of the first differing element, or -1.
int64_t first_mismatch(const HostBuf& a, const HostBuf& b) {
  const size_t es = dtype_size(a.dtype);
  for (int64_t i = 0; i < a.elements; ++i)
    if (std::memcmp(a.mem.data() + i * es, b.mem.data() + i * es, es) != 0) return i;
  return -1;
}

std::string pair_name(DType dst, DType src) {
  return std::string(dtype_name(src)) + " -> " + dtype_name(dst);
}

}  // namespace

TEST_CASE("cuda table and device count say what this build and machine have") {
  std::string why;
  const int count = cuda_device_count(&why);
  CHECK(count >= 0);
  const Backend* cuda = cuda_backend();
  if (!cuda) {
    MESSAGE("built without CUDA: " << why);
    CHECK(count == 0);
    CHECK(why.find("built without CUDA") != std::string::npos);
    float x = 0;
    const View host = make_view(&x, DType::f32, {1});
    CHECK_THROWS_WITH_AS(copy_between_devices(host, Device::cuda(), host, Device::cpu()),
                         doctest::Contains("ringflow was built without CUDA"),
                         std::runtime_error);
    CHECK(allocate_pinned_host(0) == nullptr);
    CHECK_THROWS_WITH_AS(allocate_pinned_host(64), doctest::Contains("built without CUDA"),
                         std::runtime_error);
    free_pinned_host(nullptr);
    CHECK_THROWS_WITH_AS(set_cuda_device(0), doctest::Contains("built without CUDA"),
                         std::runtime_error);
    CHECK(cuda_memory_stats(0).reserved == 0);
    cuda_empty_cache();
    CHECK_THROWS_WITH_AS(cuda_record_stream(&x, nullptr), doctest::Contains("built without CUDA"),
                         std::runtime_error);
    CHECK_THROWS_AS(cuda_memory_stats(-1), std::invalid_argument);
    return;
  }
  CHECK(std::string(cuda->name) == "cuda");
  // Every entry: simt_kernels_test ("the CUDA kernel table has every entry the models need").
  CHECK(allocate_pinned_host(0) == nullptr);
  free_pinned_host(nullptr);
  if (count == 0) {
    MESSAGE("CUDA build, no device: " << why);
    CHECK(why.find("cudaGetDeviceCount") != std::string::npos);
    CHECK(why.find("(error ") != std::string::npos);
    // Page-locked memory needs a driver too: the failure names the call.
    CHECK_THROWS_WITH_AS(allocate_pinned_host(64), doctest::Contains("cudaHostAlloc"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(set_cuda_device(0), doctest::Contains("cudaSetDevice(0) failed"),
                         std::runtime_error);
  } else {
    set_cuda_device(count - 1);
    set_cuda_device(0);
    CHECK_THROWS_WITH_AS(set_cuda_device(count), doctest::Contains("cudaSetDevice"),
                         std::runtime_error);
  }
  // The allocator's API answers without a device; pointers not from it are refused.
  if (count == 0) CHECK(cuda_memory_stats(0).raw_allocations == 0);
  CHECK_THROWS_AS(cuda_memory_stats(-1), std::invalid_argument);
  int not_device_memory = 0;
  CHECK_THROWS_WITH_AS(cuda_record_stream(&not_device_memory, nullptr),
                       doctest::Contains("not memory of the CUDA caching allocator"),
                       std::invalid_argument);
  cuda_empty_cache();
  // Shape checks come before any CUDA call, so they hold without a device too.
  float m[24] = {};
  CHECK_THROWS_WITH_AS(cuda->matmul(make_view(m, DType::f32, {1, 2, 3}), make_view(m, DType::f32, {1, 2, 4}),
                                    make_view(m, DType::f32, {1, 5, 3})),
                       doctest::Contains("matmul on cuda: shapes do not match"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(cuda->matmul(make_view(m, DType::i32, {1, 2, 3}), make_view(m, DType::i32, {1, 2, 4}),
                                    make_view(m, DType::i32, {1, 4, 3})),
                       doctest::Contains("dtype i32 not implemented"), std::invalid_argument);
  float x[2] = {};
  CHECK_THROWS_AS(cuda->copy(make_view(x, DType::f32, {2}), make_view(x, DType::f32, {1})),
                  std::invalid_argument);
  CHECK_THROWS_AS(copy_between_devices(make_view(x, DType::f32, {2}), Device::cuda(),
                                       make_view(x, DType::f32, {1}), Device::cpu()),
                  std::invalid_argument);
}

TEST_CASE("allocate, fill and read back; running out of memory names the request" *
          doctest::skip(kNoDevice)) {
  const Backend& cuda = *cuda_backend();
  CHECK(cuda.allocate(0) == nullptr);
  {
    DeviceBuf buf(DType::f32, 1 << 18);  // 1 MiB
    REQUIRE(buf.data != nullptr);
    cuda.fill(buf.flat(), 1.5);
    const HostBuf back = download(buf);
    const float* f = reinterpret_cast<const float*>(back.mem.data());
    int64_t bad = 0;
    for (int64_t i = 0; i < back.elements; ++i) bad += f[i] != 1.5f;
    CHECK(bad == 0);
  }
  try {
    cuda.allocate(size_t{1} << 60);
    FAIL("allocating 2^60 bytes did not throw");
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    MESSAGE(msg);
    // The caching allocator's OutOfMemoryError, after emptying its cache and retrying.
    CHECK(msg.find(": out of memory: cannot allocate 1.00 EiB (1152921504606846976 bytes") !=
          std::string::npos);
    CHECK(msg.find("cudaMemGetInfo: ") != std::string::npos);
  }
}

TEST_CASE("the caching allocator serves repeated steps from its cache; empty_cache gives it back" *
          doctest::skip(kNoDevice)) {
  set_cuda_device(0);
  cuda_empty_cache();
  const CachingAllocatorStats start = cuda_memory_stats(0);
  // A step's buffers: one from the small pool, one from a 20 MiB segment, one of its own.
  const int64_t elements[] = {100, 300000, 10000000};
  int64_t step_bytes = 0;
  for (int64_t n : elements) step_bytes += n * 4;
  uint64_t raw_after_first_step = 0;
  for (int step = 0; step < 3; ++step) {
    {
      DeviceBuf a(DType::f32, elements[0]), b(DType::f32, elements[1]), c(DType::f32, elements[2]);
      for (const DeviceBuf* buf : {&a, &b, &c}) cuda_backend()->fill(buf->flat(), step);
      CHECK(cuda_memory_stats(0).allocated >= start.allocated + step_bytes);
    }
    const CachingAllocatorStats s = cuda_memory_stats(0);
    CHECK(s.allocated == start.allocated);
    if (step == 0) raw_after_first_step = s.raw_allocations;
    CHECK(s.raw_allocations == raw_after_first_step);  // later steps: no cudaMalloc
  }
  const CachingAllocatorStats s = cuda_memory_stats(0);
  CHECK(s.raw_allocations >= start.raw_allocations + 3);
  CHECK(s.peak_allocated >= start.allocated + step_bytes);
  CHECK(s.reserved >= start.reserved + 2 * 1024 * 1024 + 20 * 1024 * 1024 + 40000000);
  cuda_reset_peak_memory_stats(0);
  CHECK(cuda_memory_stats(0).peak_allocated == start.allocated);
  cuda_empty_cache();
  CHECK(cuda_memory_stats(0).reserved == start.reserved);
  CHECK(cuda_memory_stats(0).raw_frees - s.raw_frees == s.raw_allocations - start.raw_allocations);
}

TEST_CASE("pinned host memory: device -> pinned -> device keeps the bits" *
          doctest::skip(kNoDevice)) {
  const int64_t n = (int64_t{1} << 20) + 7;
  HostBuf src = host_values(DType::f32, n, [](int64_t i) { return 0.5 * i - 7; });
  DeviceBuf dev(DType::f32, n), back(DType::f32, n);
  upload(dev, src);
  void* pinned = allocate_pinned_host(n * sizeof(float));
  REQUIRE(pinned != nullptr);
  const View staged = make_view(pinned, DType::f32, {n});
  copy_between_devices(staged, Device::cpu(), dev.flat(), Device::cuda());
  copy_between_devices(back.flat(), Device::cuda(), staged, Device::cpu());
  CHECK(std::memcmp(pinned, src.mem.data(), src.mem.size()) == 0);
  CHECK(first_mismatch(download(back), src) == -1);
  free_pinned_host(pinned);
}

TEST_CASE("fill every dtype, contiguous and strided, as the reference does" *
          doctest::skip(kNoDevice)) {
  const Backend& cuda = *cuda_backend();
  const Shape shape = {5, 7};
  const Shape strided = {14 * 3, 2};  // every other column of every third row of (15, 14)
  for (DType dt : kAllDtypes) {
    CAPTURE(dtype_name(dt));
    for (const Shape& strides : {contiguous_strides(shape), strided}) {
      const int64_t n = span(shape, strides);
      HostBuf expected = host_values(dt, n, [](int64_t i) { return double(i % 13); });
      DeviceBuf dev(dt, n);
      upload(dev, expected);
      cuda.fill(dev.view(shape, strides), -2.75);
      reference_backend().fill(expected.view(shape, strides), -2.75);
      const HostBuf got = download(dev);
      CHECK(first_mismatch(got, expected) == -1);
    }
  }
}

TEST_CASE("host <-> device round trip keeps the bits of f32, f16 and bf16" *
          doctest::skip(kNoDevice)) {
  std::mt19937 rng(7);
  const int64_t n = 1000003;  // prime
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    HostBuf host(dt, n);
    for (auto& byte : host.mem) byte = static_cast<unsigned char>(rng());  // any bits, NaNs too
    DeviceBuf dev(dt, n);
    upload(dev, host);
    const HostBuf back = download(dev);
    CHECK(first_mismatch(back, host) == -1);
  }
}

TEST_CASE("device copies with strides, broadcast and dtype conversion match the reference" *
          doctest::skip(kNoDevice)) {
  const Backend& cuda = *cuda_backend();
  const Shape shape = {3, 4, 5};
  struct Case {
    const char* name;
    Shape src_strides;
  };
  const Case cases[] = {
      {"contiguous", contiguous_strides(shape)},
      {"transposed (2, 1, 0)", {1, 3, 12}},
      {"broadcast over dims 0 and 2", {0, 1, 0}},
  };
  const Shape dst_strides = {48, 12, 2};  // gaps between elements and rows
  for (const Case& c : cases) {
    for (DType dst_dt : kAllDtypes) {
      for (DType src_dt : kAllDtypes) {
        CAPTURE(c.name);
        const std::string pair = pair_name(dst_dt, src_dt);
        CAPTURE(pair);
        const int64_t src_n = span(shape, c.src_strides);
        const int64_t dst_n = span(shape, dst_strides);
        HostBuf src = host_values(src_dt, src_n, [](int64_t i) { return 0.75 * i - 20.5; });
        HostBuf expected = host_values(dst_dt, dst_n, [](int64_t) { return 7.0; });
        DeviceBuf src_dev(src_dt, src_n), dst_dev(dst_dt, dst_n);
        upload(src_dev, src);
        upload(dst_dev, expected);

        cuda.copy(dst_dev.view(shape, dst_strides), src_dev.view(shape, c.src_strides));
        reference_backend().copy(expected.view(shape, dst_strides), src.view(shape, c.src_strides));
        const HostBuf got = download(dst_dev);
        const int64_t bad = first_mismatch(got, expected);
        CHECK_MESSAGE(bad == -1, "first mismatch at slot " << bad);
      }
    }
  }
}

TEST_CASE("device copies merge dims: 10-D contiguous works, 10 unmergeable dims throw" *
          doctest::skip(kNoDevice)) {
  const Backend& cuda = *cuda_backend();
  const Shape shape(10, 2);  // 1024 elements
  Shape reversed(10);
  for (int d = 0; d < 10; ++d) reversed[d] = int64_t{1} << d;
  HostBuf src = host_values(DType::f32, 1024, [](int64_t i) { return double(i); });
  DeviceBuf src_dev(DType::f32, 1024), dst_dev(DType::f64, 1024);
  upload(src_dev, src);

  cuda.copy(dst_dev.view(shape), src_dev.view(shape));
  HostBuf expected(DType::f64, 1024);
  reference_backend().copy(expected.view(shape), src.view(shape));
  CHECK(first_mismatch(download(dst_dev), expected) == -1);

  CHECK_THROWS_WITH_AS(cuda.copy(dst_dev.view(shape), src_dev.view(shape, reversed)),
                       doctest::Contains("cannot be merged"), std::invalid_argument);
}

TEST_CASE("copy_between_devices stages converting and non-dense copies" *
          doctest::skip(kNoDevice)) {
  const Shape shape = {2, 3, 4, 5};  // (N, C, H, W)
  const Shape channels_last = {60, 1, 15, 3};  // dense, dims (0, 2, 3, 1) in memory
  const Shape gappy = {130, 40, 10, 2};        // every other element, padded rows
  const int64_t dense_n = 120, gappy_n = span(shape, gappy);

  SUBCASE("host f32 channels-last -> device f16 with gaps, and back into host f64 with gaps") {
    HostBuf src = host_values(DType::f32, dense_n, [](int64_t i) { return 0.1 * i - 3; });
    DeviceBuf dev(DType::f16, gappy_n);
    cuda_backend()->fill(dev.flat(), 0.0);
    copy_between_devices(dev.view(shape, gappy), Device::cuda(), src.view(shape, channels_last),
                         Device::cpu());
    HostBuf expected_dev(DType::f16, gappy_n);
    reference_backend().fill(expected_dev.flat(), 0.0);
    reference_backend().copy(expected_dev.view(shape, gappy), src.view(shape, channels_last));
    CHECK(first_mismatch(download(dev), expected_dev) == -1);

    HostBuf back(DType::f64, gappy_n), expected_back(DType::f64, gappy_n);
    reference_backend().fill(back.flat(), -1.0);
    reference_backend().fill(expected_back.flat(), -1.0);
    copy_between_devices(back.view(shape, gappy), Device::cpu(), dev.view(shape, gappy),
                         Device::cuda());
    reference_backend().copy(expected_back.view(shape, gappy), expected_dev.view(shape, gappy));
    CHECK(first_mismatch(back, expected_back) == -1);
  }

  SUBCASE("channels-last bf16 goes over as one dense copy and comes back into NCHW") {
    HostBuf src = host_values(DType::bf16, dense_n, [](int64_t i) { return i * 0.5; });
    DeviceBuf dev(DType::bf16, dense_n);
    copy_between_devices(dev.view(shape, channels_last), Device::cuda(),
                         src.view(shape, channels_last), Device::cpu());
    CHECK(first_mismatch(download(dev), src) == -1);  // same bytes in the same order
    HostBuf nchw(DType::bf16, dense_n), expected(DType::bf16, dense_n);
    copy_between_devices(nchw.view(shape), Device::cpu(), dev.view(shape, channels_last),
                         Device::cuda());
    reference_backend().copy(expected.view(shape), src.view(shape, channels_last));
    CHECK(first_mismatch(nchw, expected) == -1);
  }
}

TEST_CASE("cuBLAS matmul matches the reference over layouts, sizes and every float dtype" *
          doctest::skip(kNoDevice)) {
  const Backend& cuda = *cuda_backend();
  struct Dims {
    int64_t B, M, K, N;
  };
  const Dims sizes[] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {3, 17, 1, 13}, {1, 64, 129, 31}, {4, 1, 37, 1}};
  // Strides of a (B, R, C) operand by name: the GEMM layouts, and one that needs a copy.
  const auto strides_of = [](const char* layout, int64_t R, int64_t C) -> Shape {
    const std::string l = layout;
    if (l == "row-major") return {R * C, C, 1};
    if (l == "transposed") return {R * C, 1, R};
    if (l == "broadcast batch") return {0, C, 1};
    return {2 * R * C, 2 * C, 2};  // "every other element"
  };
  const char* operand_layouts[] = {"row-major", "transposed", "broadcast batch", "every other element"};
  const char* out_layouts[] = {"row-major", "transposed"};
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const Dims& d : sizes) {
      for (const char* la : operand_layouts) {
        for (const char* lb : operand_layouts) {
          for (const char* lo : out_layouts) {
            const std::string name = std::string(dtype_name(dt)) + " (B, M, K, N) = (" +
                                     std::to_string(d.B) + ", " + std::to_string(d.M) + ", " +
                                     std::to_string(d.K) + ", " + std::to_string(d.N) + "), a " +
                                     la + ", b " + lb + ", out " + lo;
            CAPTURE(name);
            const Shape sa = strides_of(la, d.M, d.K), sb = strides_of(lb, d.K, d.N);
            const Shape so = strides_of(lo, d.M, d.N);
            const Shape shape_a = {d.B, d.M, d.K}, shape_b = {d.B, d.K, d.N}, shape_o = {d.B, d.M, d.N};
            const int64_t na = span(shape_a, sa), nb = span(shape_b, sb), no = span(shape_o, so);
            HostBuf a = host_values(dt, na, [](int64_t i) { return 0.25 * (i % 11) - 1; });
            HostBuf b = host_values(dt, nb, [](int64_t i) { return 0.5 * (i % 7) - 1.5; });
            HostBuf expected(dt, no);
            reference_backend().fill(expected.flat(), 0.0);
            reference_backend().matmul(expected.view(shape_o, so), a.view(shape_a, sa),
                                       b.view(shape_b, sb));
            DeviceBuf a_dev(dt, na), b_dev(dt, nb), out_dev(dt, no);
            upload(a_dev, a);
            upload(b_dev, b);
            cuda.fill(out_dev.flat(), 0.0);
            cuda.matmul(out_dev.view(shape_o, so), a_dev.view(shape_a, sa), b_dev.view(shape_b, sb));
            // Multiples of 1/8 with sums far below 2^24: exact whatever the order of additions
            // (f16/bf16: the inputs are exact in 16 bits, and the f32 sum is rounded once).
            CHECK(first_mismatch(download(out_dev), expected) == -1);
          }
        }
      }
    }
  }
}

TEST_CASE("cuBLAS matmul keeps f32 in f32 unless TF32 is allowed" * doctest::skip(kNoDevice)) {
  // 1 + 2^-13 needs 13 mantissa bits: TF32 (10 bits) would round it to 1 and every sum to 64.
  const int64_t n = 64;
  const double x = 1.0 + std::ldexp(1.0, -13);
  HostBuf a = host_values(DType::f32, n * n, [&](int64_t) { return x; });
  HostBuf b = host_values(DType::f32, n * n, [](int64_t) { return 1.0; });
  DeviceBuf a_dev(DType::f32, n * n), b_dev(DType::f32, n * n), out_dev(DType::f32, n * n);
  upload(a_dev, a);
  upload(b_dev, b);
  cuda_backend()->matmul(out_dev.view({1, n, n}), a_dev.view({1, n, n}), b_dev.view({1, n, n}));
  const HostBuf out = download(out_dev);
  const float* got = reinterpret_cast<const float*>(out.mem.data());
  int64_t bad = 0;
  for (int64_t i = 0; i < n * n; ++i) bad += got[i] != static_cast<float>(n * x);
  CHECK_MESSAGE(bad == 0, "out[0] = " << got[0] << ", expected " << n * x);

  // Allowed, TF32 rounds x to 1 in the products: every sum is 64 (H100: TF32 tensor cores).
  set_allow_tf32(true);
  cuda_backend()->matmul(out_dev.view({1, n, n}), a_dev.view({1, n, n}), b_dev.view({1, n, n}));
  set_allow_tf32(false);
  const HostBuf rounded = download(out_dev);
  CHECK(reinterpret_cast<const float*>(rounded.mem.data())[0] == static_cast<float>(n));
}

}  // namespace ringflow
