// The umbrella header for code that embeds ringflow: tensors, autograd and the functional ops.
#pragma once

#include "framework/autograd.h"
#include "framework/dispatch.h"
#include "framework/ops.h"
#include "framework/random.h"
#include "framework/tensor.h"
#include "kernels/backend.h"
#include "kernels/cuda_devices.h"

#include "framework/serialize.h"
#include "framework/data/data.h"
#include "framework/nn/nn.h"
#include "framework/optim/optim.h"
#include "framework/checkpoint.h"
