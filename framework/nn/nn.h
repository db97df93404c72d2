// The nn umbrella: Module and the layers models are built from (ringflow::nn).
#pragma once

#include "framework/nn/activation.h"
#include "framework/nn/batch_norm.h"
#include "framework/nn/conv2d.h"
#include "framework/nn/dropout.h"
#include "framework/nn/flatten.h"
#include "framework/nn/init.h"
#include "framework/nn/linear.h"
#include "framework/nn/module.h"
#include "framework/nn/pooling.h"
#include "framework/nn/sequential.h"
