// What this build of ringflow is and what it runs on: its version and git commit, the options
// it was configured with, the CPU's instruction sets as the kernels see them, and the versions
// of the libraries it calls, asked of the libraries at run time where they tell.
// comm::build_info() (comm/base/build_info.h) adds the MPI library's; `train --version`,
// the metrics header and the Python module read that one.
#pragma once

#include <string>
#include <vector>

namespace ringflow {

// The instruction sets the CPU kernels use, as they decide at run time.
struct CpuIsa {
  std::string model;        // /proc/cpuinfo's "model name" ("" where there is none)
  bool avx2 = false;        // AVX2 and FMA
  bool avx512 = false;      // AVX-512 F, BW, DQ, VL (oneDNN's avx512_core)
  bool avx512_bf16 = false; // bf16 arithmetic, the CPU's and oneDNN's: without it bf16 widens to f32 (backend.h)
  bool amx = false;         // oneDNN runs bf16 convolutions and matmuls on AMX tiles
  std::string onednn_isa;   // oneDNN's effective ISA, e.g. "avx512_core_bf16"
  bool bf16_winograd = false;  // ringflow's bf16 Winograd runs here (kernels/cpu/winograd.cpp)
  bool f32_winograd = false;   // ringflow's f32 Winograd runs here (kernels/cpu/winograd_f32.cpp)
};

struct LibraryVersion {
  std::string name;     // "oneDNN", "CUDA runtime", "CUDA driver", "cuBLAS", "cuDNN", "NCCL", "MPI"
  std::string version;  // as the library reports it at run time
};

struct BuildInfo {
  std::string version;     // the project's (meson.build)
  std::string commit;      // `git describe --always --dirty` at build time; "unknown" outside git
  std::string build_type;  // meson's buildtype: release, debug, ...
  std::string compiler;    // e.g. "gcc 12.2.0"
  bool cuda = false;       // kernels/cuda built in
  std::vector<std::string> cuda_architectures;  // -Dgpu_arch: compute capabilities, e.g. "90"
  bool cudnn = false;      // cuDNN convolutions built in
  std::string mpi;         // the MPI the build was configured against, e.g. "mpich 4.0.2"
  CpuIsa cpu;
  std::vector<LibraryVersion> libraries;
};

// The kernels' part: everything but MPI's run-time version (comm::build_info() adds it).
BuildInfo build_info();

// What the CPU kernels see (cached after the first call).
CpuIsa cpu_isa();

// Lines of "name: value" for people (`train --version`).
std::string describe(const BuildInfo& info);

// The CUDA libraries' versions (runtime, driver, cuBLAS, cuDNN, NCCL); none without CUDA.
// Defined by kernels/cuda/ (kernels/no_cuda.cpp without CUDA).
std::vector<LibraryVersion> cuda_library_versions();

}  // namespace ringflow
