// Batched device-to-device copies (Backend::copy_regions): a decode step's new keys and values into their cache
// rows or pages in one launch instead of one copy call per sequence.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "dashattn/backend.h"

namespace dashattn {
namespace cuda {

void launch_copy_regions(const CopyRegion* regions, size_t count, cudaStream_t stream);

}  // namespace cuda
}  // namespace dashattn
