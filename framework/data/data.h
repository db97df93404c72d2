// ringflow::data umbrella: datasets, readers, transforms, samplers and the DataLoader.
#pragma once

#include "framework/data/batch_to_device.h"
#include "framework/data/cifar10.h"
#include "framework/data/data_loader.h"
#include "framework/data/dataset.h"
#include "framework/data/distributed_sampler.h"
#include "framework/data/idx.h"
#include "framework/data/mnist.h"
#include "framework/data/sampler.h"
#include "framework/data/synthetic.h"
#include "framework/data/transforms.h"
