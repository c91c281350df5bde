#include "copy_regions.cuh"

#include <cstdint>

#include "cuda_internal.cuh"

namespace dashattn {
namespace cuda {
namespace {

// Regions per launch: they travel by value in the kernel's parameters (24 bytes each, within the 4 KB that every
// architecture takes), so a launch needs no upload and stays capturable.
constexpr int kRegionsPerLaunch = 128;
constexpr int kThreads = 256;

struct RegionBatch {
  CopyRegion region[kRegionsPerLaunch];
};

// Block (x, y) copies slices x, x + gridDim.x, ... of region y, 16 bytes per thread where the region's ends and
// length allow it (a cache row is h_kv · d elements: a multiple of 16 bytes in practice), else byte by byte.
__global__ void __launch_bounds__(kThreads) copy_regions_kernel(const __grid_constant__ RegionBatch batch) {
  const CopyRegion r = batch.region[blockIdx.y];
  const auto dst = reinterpret_cast<uintptr_t>(r.dst), src = reinterpret_cast<uintptr_t>(r.src);
  const size_t stride = size_t(gridDim.x) * kThreads;
  if (((dst | src | r.bytes) & 15u) == 0) {
    uint4* d = static_cast<uint4*>(r.dst);
    const uint4* s = static_cast<const uint4*>(r.src);
    for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < r.bytes / 16; i += stride) d[i] = s[i];
  } else {
    char* d = static_cast<char*>(r.dst);
    const char* s = static_cast<const char*>(r.src);
    for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < r.bytes; i += stride) d[i] = s[i];
  }
}

}  // namespace

void launch_copy_regions(const CopyRegion* regions, size_t count, cudaStream_t stream) {
  for (size_t first = 0; first < count; first += kRegionsPerLaunch) {
    const int n = static_cast<int>(count - first < size_t(kRegionsPerLaunch) ? count - first : kRegionsPerLaunch);
    RegionBatch batch{};
    size_t largest = 0;
    for (int i = 0; i < n; ++i) {
      batch.region[i] = regions[first + i];
      largest = regions[first + i].bytes > largest ? regions[first + i].bytes : largest;
    }
    if (largest == 0) continue;
    // Enough blocks per region that a prefill step's large regions spread over the GPU: one 16-byte piece per
    // thread, at most 64 blocks per region.
    const size_t pieces = (largest + 15) / 16;
    const unsigned blocks = static_cast<unsigned>(pieces / kThreads + 1 < 64 ? pieces / kThreads + 1 : 64);
    copy_regions_kernel<<<dim3(blocks, static_cast<unsigned>(n)), kThreads, 0, stream>>>(batch);
    DASHATTN_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace cuda
}  // namespace dashattn
