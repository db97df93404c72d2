// The nn umbrella: Module and the layers models are built from (ringflow::nn).
#pragma once

#include "ringflow/framework/nn/activation.h"
#include "ringflow/framework/nn/batch_norm.h"
#include "ringflow/framework/nn/conv2d.h"
#include "ringflow/framework/nn/dropout.h"
#include "ringflow/framework/nn/flatten.h"
#include "ringflow/framework/nn/init.h"
#include "ringflow/framework/nn/linear.h"
#include "ringflow/framework/nn/module.h"
#include "ringflow/framework/nn/pooling.h"
#include "ringflow/framework/nn/sequential.h"
