// Umbrella header for optim/: optimizers with FP32 master weights, their state files, and LR schedulers.
#pragma once
#include "core/serialize.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/lamb.h"
#include "ops/optim_kernels.h"
#include "optim/optimizer.h"
#include "optim/plateau.h"
#include "optim/rmsprop.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
#include "optim/swa_utils.h"
