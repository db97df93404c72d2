// The CUDA backend's own kernels run on the CPU (HostExec, host_exec.h): a kernel table over
// host memory whose entries are the very bodies the GPU runs, over the same launch grids.
// matmul and conv, which the GPU hands to cuBLAS and cuDNN, are the reference's here (the
// direct convolutions of conv.h, for builds without cuDNN, are tested on their own).
// Tests compare it with the reference backend, so CI checks the GPU kernels without a GPU.
#pragma once

#include "ringflow/kernels/backend.h"

namespace ringflow {

const Backend& simt_host_backend();

}  // namespace ringflow
