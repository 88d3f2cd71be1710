// The consumer's own data/data.h: as core/tensor.h, a path mpx's sources use for a header of theirs.
#pragma once
#define CONSUMER_DATA_DATA 1
