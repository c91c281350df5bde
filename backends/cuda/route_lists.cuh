// Candidate lists of Stage 1's sweep kernels (route_fast.cuh, route_cluster.cuh): the candidate threshold, list
// compaction, the segmented view of a split block's lists, and the warp reductions the listing uses.
#pragma once

#include <cmath>
#include <cstdint>

#include "dashattn/entmax.h"
#include "warp_scan.cuh"

namespace dashattn {
namespace cuda {
namespace route_detail {

// The candidates of row `row`: list columns row, row + stride, ... (one per warp of a split block, `segments` of
// them) concatenated; end0..end2 are the running lengths after the first three segments.
struct SegmentedList {
  const float* vals;
  int row, stride, list_stride, end0, end1, end2;
  __device__ float operator()(int i) const {
    int s = 0, begin = 0;
    if (i >= end0) {
      s = 1;
      begin = end0;
      if (i >= end1) {
        s = 2;
        begin = end1;
        if (i >= end2) {
          s = 3;
          begin = end2;
        }
      }
    }
    return vals[(s * stride + row) * list_stride + (i - begin)];
  }
};

// Candidate threshold for a row maximum m: slightly below m − 1 so that float rounding never drops a support
// element (extra candidates are harmless: the solver and the emit ignore x ≤ τ). Non-decreasing in m for every
// float m < 2^24, with or without the multiply-add contracted (checked over all floats); above, the rounding of
// m − 1 can make it dip by an ulp.
__device__ __forceinline__ float candidate_threshold(float m) { return m - 1.0f - 1e-4f * fmaxf(1.0f, fabsf(m)); }

// Keeps the entries of one list column with x > thr, in their order, calling on_kept(x, keep) for every entry in
// that order (keep: whether x is kept); returns how many. Without a branch per entry: each entry is stored at the
// next free slot whether kept or not (the slot is at or below the entry, so nothing unread is overwritten, and a
// dropped entry's copy is overwritten by the next kept one or lies past the count). One thread walks each list, and
// the lists of a warp's rows keep different entries: branches diverged per entry.
template <typename OnEntry>
__device__ __forceinline__ int compact_list_with(float* vals, uint16_t* ids, int n, float thr, OnEntry&& on_entry) {
  int kept = 0;
  for (int e = 0; e < n; ++e) {
    const float x = vals[e];
    const uint16_t id = ids[e];
    const bool keep = x > thr;
    vals[kept] = x;
    ids[kept] = id;
    on_entry(x, keep);
    kept += keep ? 1 : 0;
  }
  return kept;
}

// The sweep compacts a list about to overflow with this.
__device__ __forceinline__ int compact_list(float* vals, uint16_t* ids, int n, float thr) {
  return compact_list_with(vals, ids, n, thr, [](float, bool) {});
}

// The solve drops the entries its row's final maximum overtook with this, adding the kept entries in their order to
// the exact solve's first pass (which entmax_threshold_given_max then takes instead of walking the list again).
__device__ __forceinline__ int compact_list_first_pass(float* vals, uint16_t* ids, int n, float thr,
                                                       dashattn::detail::FirstPass* first) {
  return compact_list_with(vals, ids, n, thr, [&](float x, bool keep) { first->add_if(x, keep); });
}

// The maximum of v over a row's quad (the 4 lanes that hold an m16 fragment row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
