// ringflow::data umbrella: datasets, readers, transforms, samplers and the DataLoader.
#pragma once

#include "ringflow/framework/data/batch_to_device.h"
#include "ringflow/framework/data/cifar10.h"
#include "ringflow/framework/data/data_loader.h"
#include "ringflow/framework/data/dataset.h"
#include "ringflow/framework/data/distributed_sampler.h"
#include "ringflow/framework/data/idx.h"
#include "ringflow/framework/data/image_folder.h"
#include "ringflow/framework/data/image_shards.h"
#include "ringflow/framework/data/iterable_dataset.h"
#include "ringflow/framework/data/tar.h"
#include "ringflow/framework/data/mnist.h"
#include "ringflow/framework/data/partition.h"
#include "ringflow/framework/data/sampler.h"
#include "ringflow/framework/data/shard_writer.h"
#include "ringflow/framework/data/synthetic.h"
#include "ringflow/framework/data/transforms.h"
