// The umbrella header for code that embeds ringflow: tensors, autograd and the functional ops.
#pragma once

#include "ringflow/framework/autocast.h"
#include "ringflow/framework/autograd.h"
#include "ringflow/framework/dispatch.h"
#include "ringflow/framework/graphed_step.h"
#include "ringflow/framework/memory_format.h"
#include "ringflow/framework/ops.h"
#include "ringflow/framework/random.h"
#include "ringflow/framework/tensor.h"
#include "ringflow/kernels/backend.h"
#include "ringflow/kernels/cuda_devices.h"

#include "ringflow/framework/serialize.h"
#include "ringflow/framework/data/data.h"
#include "ringflow/framework/nn/nn.h"
#include "ringflow/framework/optim/optim.h"
#include "ringflow/framework/checkpoint.h"
#include "ringflow/framework/weights.h"
