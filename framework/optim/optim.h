// ringflow::optim umbrella: optimizers, learning-rate schedules, gradient clipping, loss scaling.
#pragma once

#include "ringflow/framework/optim/adam.h"
#include "ringflow/framework/optim/clip_grad.h"
#include "ringflow/framework/optim/grad_scaler.h"
#include "ringflow/framework/optim/lr_schedule.h"
#include "ringflow/framework/optim/optimizer.h"
#include "ringflow/framework/optim/sgd.h"
