// The data pipeline in one include: datasets, token streams, samplers, the loader and transforms.
#pragma once

#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/datasets.h"
#include "data/gpu_decode.h"
#include "data/idx.h"
#include "data/image_pipeline.h"
#include "data/jpeg.h"
#include "data/map_dataset.h"
#include "data/prefetcher.h"
#include "data/sampler.h"
#include "data/text.h"
#include "data/transforms.h"
