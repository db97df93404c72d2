// Builds without cuDNN: batch norm stays on the own kernels (convolutions too: simt_conv.cu).
#include "ringflow/kernels/cuda/cuda_kernels.h"
#include "ringflow/kernels/cudnn_choices.h"

namespace ringflow::cuda {

void use_cudnn_batch_norm(Backend&) {}

std::string cudnn_version() { return "not built in (-Dcudnn=disabled or not found)"; }

}  // namespace ringflow::cuda

namespace ringflow {

std::vector<std::string> cudnn_conv_choices() { return {}; }
std::vector<std::string> cudnn_batch_norm_choices() { return {}; }

}  // namespace ringflow
