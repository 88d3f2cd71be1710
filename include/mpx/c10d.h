// For code ported from LibTorch's c10d (`#include <c10d/ProcessGroupMPI.hpp>`): `c10d::` names mpx::c10d. Opt-in.
#pragma once

#include <mpx/torch.h>

#include "distributed/c10d.h"

/// `c10d::ProcessGroupMPI::createProcessGroupMPI()`, `c10d::AllreduceOptions`, ...: the process-group
/// calls of LibTorch's distributed example compile unchanged over mpx::distributed.
namespace c10d = mpx::c10d;
