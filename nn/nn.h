// The nn umbrella header: Module, holders, containers, layers, losses, functional, init, utils.
#pragma once

#include "nn/ordered_dict.h"
#include "nn/module.h"
#include "nn/options.h"
#include "nn/container.h"
#include "nn/modules.h"
#include "nn/activations.h"
#include "nn/losses.h"
#include "nn/rnn.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/utils.h"
#include "nn/checkpoint.h"
#include "nn/embedding_bag.h"
#include "nn/distributed.h"
#include "nn/sync_batchnorm.h"
#include "nn/attention.h"
