// Warp-wide integer scans shared by the routing (Stage 1) and attention (Stage 2) kernels.
#pragma once

namespace dashattn::cuda {

// Inclusive prefix sum of v over the lanes of a (converged) warp: lane i gets v_0 + ... + v_i.
__device__ __forceinline__ int warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, v, off);
    if (lane >= off) v += up;
  }
  return v;
}

}  // namespace dashattn::cuda
