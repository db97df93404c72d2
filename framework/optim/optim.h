// ringflow::optim umbrella: optimizers, learning-rate schedules, gradient clipping.
#pragma once

#include "ringflow/framework/optim/adam.h"
#include "ringflow/framework/optim/clip_grad.h"
#include "ringflow/framework/optim/lr_schedule.h"
#include "ringflow/framework/optim/optimizer.h"
#include "ringflow/framework/optim/sgd.h"
