// Profiling build only (-DDASHATTN_PHASE_CLOCKS): timestamps of a kernel's phases, for finding where a short
// launch (a decode step's Stage 1 or Stage 2) spends its time. Without the macro every call here is empty.
//
// Thread 0 of each CTA stamps the global timer at the kernel's marks (PhaseKernel lists them); the last CTA to
// finish prints, over the CTAs marked active, the mean and the maximum of every stamp after the earliest entry of
// the launch, and again after each CTA's own entry, in ns; for a launch of up to 1024 CTAs also its tail: which
// CTAs reach the second-to-last mark last, with their multiprocessor and work (Stage 2: also the arrival time of
// each of their first 32 tiles, and of the earliest CTAs'). Measured this way on an H100
// (perf-log.md): a 64K decode step's Stage 2 spends ~2 us before its tile stream starts and ~4 us after its last
// tile; a 64K prefill CTA with the bias at 93.75 % ~11 us before its first tile.
#pragma once

#include <cstdint>
#include <cstdio>

namespace dashattn::cuda {

// Mark 0 is the entry and the last mark the exit of every kernel; a kernel's names string lists its marks in
// order.
enum class PhaseKernel : int { kAttend = 0, kRouteCluster = 1 };
constexpr int kPhaseMarks = 9;

#ifdef DASHATTN_PHASE_CLOCKS
constexpr int kPhaseMaxCtas = 16384;
__device__ unsigned long long g_phase[2][kPhaseMaxCtas][kPhaseMarks];
__device__ int g_phase_active[2][kPhaseMaxCtas];
__device__ int g_phase_work[2][kPhaseMaxCtas];  // the CTA's work (attend: its tiles)
__device__ int g_phase_sm[2][kPhaseMaxCtas];
constexpr int kPhaseTiles = 32;
__device__ unsigned long long g_phase_tile[kPhaseMaxCtas][kPhaseTiles];  // attend: when each of its first tiles was in
__device__ unsigned int g_phase_done[2];
__device__ float g_phase_sink;

__device__ __forceinline__ int phase_cta() {
  return int(((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) % kPhaseMaxCtas);
}
__device__ __forceinline__ void phase_mark(PhaseKernel k, int i) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  g_phase[int(k)][phase_cta()][i] = t;
}
// Stamp i once v (a loaded or computed value) is ready: the store waits for its register.
__device__ __forceinline__ void phase_mark_ready(PhaseKernel k, int i, float v) {
  g_phase_sink = v;
  phase_mark(k, i);
}
__device__ __forceinline__ void phase_set_active(PhaseKernel k, bool active, int work = 0) {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const int c = phase_cta();
  g_phase_active[int(k)][c] = active ? 1 : 0;
  g_phase_work[int(k)][c] = work;
  g_phase_sm[int(k)][c] = int(sm);
}
// Stage 2 (attend): tile `it` of this CTA is in the ring (called by one lane of the warp that consumes it).
__device__ __forceinline__ void phase_tile(int it) {
  if (it >= kPhaseTiles) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  g_phase_tile[phase_cta()][it] = t;
}
// The active CTA whose mark `late` comes next after `bound`: the latest one before it (latest), or the earliest one
// after it; -1 when none is left.
__device__ inline int phase_next_cta(int kk, int n, int late, unsigned long long bound, bool latest) {
  int best = -1;
  for (int c = 0; c < n; ++c) {
    if (!g_phase_active[kk][c]) continue;
    const unsigned long long v = g_phase[kk][c][late];
    if (latest ? v >= bound : v <= bound) continue;
    if (best < 0 || (latest ? v > g_phase[kk][best][late] : v < g_phase[kk][best][late])) best = c;
  }
  return best;
}
// A one-wave launch's tail (at most 1024 CTAs): which CTAs reach mark `late` last, and whether that follows their
// work or their sharing a multiprocessor with another CTA of the launch.
__device__ inline void phase_report_tail(int kk, int n, unsigned long long t0, int late) {
  if (n > 1024) return;
  int per_sm[256] = {};
  double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0, shared_sum = 0, alone_sum = 0;
  int used = 0, shared_n = 0, alone_n = 0;
  for (int c = 0; c < n; ++c)
    if (g_phase_active[kk][c]) ++per_sm[g_phase_sm[kk][c] & 255];
  for (int c = 0; c < n; ++c) {
    if (!g_phase_active[kk][c]) continue;
    const double x = g_phase_work[kk][c], y = double(g_phase[kk][c][late] - g_phase[kk][c][0]);
    sx += x; sy += y; sxx += x * x; sxy += x * y; syy += y * y; ++used;
    if (per_sm[g_phase_sm[kk][c] & 255] > 1) { shared_sum += y; ++shared_n; } else { alone_sum += y; ++alone_n; }
  }
  if (used < 2) return;
  const double cov = sxy / used - (sx / used) * (sy / used);
  const double vx = sxx / used - (sx / used) * (sx / used), vy = syy / used - (sy / used) * (sy / used);
  printf("phases tail: mark %d after the CTA's entry, mean %.0f ns on shared SMs (%d CTAs), %.0f alone (%d); "
         "correlation with work %.2f (work mean %.1f); latest (cta sm work entry mark):",
         late, shared_n ? shared_sum / shared_n : 0.0, shared_n, alone_n ? alone_sum / alone_n : 0.0, alone_n,
         vx > 0 && vy > 0 ? cov / sqrt(vx * vy) : 0.0, sx / used);
  unsigned long long prev = ~0ull;
  for (int r = 0; r < 8; ++r) {  // the 8 latest, by selection
    const int best = phase_next_cta(kk, n, late, prev, true);
    if (best < 0) break;
    prev = g_phase[kk][best][late];
    printf(" (%d %d %d %llu %llu)", best, g_phase_sm[kk][best], g_phase_work[kk][best], g_phase[kk][best][0] - t0,
           g_phase[kk][best][late] - t0);
  }
  printf("\n");
  if (kk != int(PhaseKernel::kAttend)) return;
  // Tile arrival times (us after the launch's first entry) of the 3 latest and the 3 earliest CTAs: whether the
  // late ones start late or stream slower.
  for (int side = 0; side < 2; ++side) {
    unsigned long long bound = side == 0 ? ~0ull : 0ull;
    for (int r = 0; r < 3; ++r) {
      const int best = phase_next_cta(kk, n, late, bound, side == 0);
      if (best < 0) break;
      bound = g_phase[kk][best][late];
      printf("phases tiles %s cta %d (%d tiles):", side == 0 ? "late" : "early", best, g_phase_work[kk][best]);
      const int nt = g_phase_work[kk][best] < kPhaseTiles ? g_phase_work[kk][best] : kPhaseTiles;
      for (int i = 0; i < nt; ++i) printf(" %.1f", double(g_phase_tile[best][i] - t0) * 1e-3);
      printf("\n");
    }
  }
}
__device__ inline void phase_report(PhaseKernel k, const char* names) {
  const int kk = int(k);
  const int n = int(gridDim.x * gridDim.y * gridDim.z) < kPhaseMaxCtas ? int(gridDim.x * gridDim.y * gridDim.z)
                                                                       : kPhaseMaxCtas;
  unsigned long long t0 = ~0ull;
  for (int c = 0; c < n; ++c) t0 = g_phase[kk][c][0] < t0 ? g_phase[kk][c][0] : t0;
  // Two views: after the launch's first entry (a one-wave launch: when each phase ends in the launch), and after
  // the CTA's own entry (a launch of many waves, such as a prefill, where the first view only averages waves).
  for (int own = 0; own < 2; ++own) {
    double mean[kPhaseMarks] = {};
    unsigned long long mx[kPhaseMarks] = {};
    int used = 0;
    for (int c = 0; c < n; ++c) {
      if (!g_phase_active[kk][c]) continue;
      ++used;
      const unsigned long long base = own ? g_phase[kk][c][0] : t0;
      for (int i = 0; i < kPhaseMarks; ++i) {
        const unsigned long long d = g_phase[kk][c][i] > base ? g_phase[kk][c][i] - base : 0;
        mean[i] += double(d);
        mx[i] = d > mx[i] ? d : mx[i];
      }
    }
    if (used == 0) return;
    printf("phases %s (ns after %s; %d active CTAs of %d): mean", names,
           own ? "the CTA's entry" : "the first entry", used, n);
    for (int i = 0; i < kPhaseMarks; ++i) printf(" %.0f", mean[i] / used);
    printf(" max");
    for (int i = 0; i < kPhaseMarks; ++i) printf(" %llu", mx[i]);
    printf("\n");
  }
  phase_report_tail(kk, n, t0, kPhaseMarks - 2);
}
// The exit stamp (the last mark); the last CTA of the launch prints the report and re-arms the counter.
__device__ __forceinline__ void phase_finish(PhaseKernel k, const char* names) {
  phase_mark(k, kPhaseMarks - 1);
  __threadfence();
  if (atomicAdd(&g_phase_done[int(k)], 1u) + 1 == gridDim.x * gridDim.y * gridDim.z) {
    __threadfence();
    phase_report(k, names);
    g_phase_done[int(k)] = 0;
  }
}
#else
__device__ __forceinline__ void phase_mark(PhaseKernel, int) {}
__device__ __forceinline__ void phase_mark_ready(PhaseKernel, int, float) {}
__device__ __forceinline__ void phase_set_active(PhaseKernel, bool, int = 0) {}
__device__ __forceinline__ void phase_tile(int) {}
__device__ __forceinline__ void phase_finish(PhaseKernel, const char*) {}
#endif

// Profiling build only (-DDASHATTN_ITEM_CLOCKS), Stage 2: thread 0 (consumer warp 0's lane 0) sums the SM cycles of
// each segment of each of its row blocks (the persistent kernel's items in turn, or the one-item kernel's one) into
// g_item_cycles, and launch_attend follows each Stage-2 launch with item_clock_report, which prints the mean per
// item and re-arms. (No printf in the attention kernel itself: a call there makes ptxas serialize its wgmma, which
// the phase-clock build above does.) Segments: 0 the item's union (persistent: the wait for it; one item: entry to
// the plan), 1 Q, tau and mu (persistent: the wait for the helpers' preparation), 2 the bias table, 3 the wait for
// the item's first tile, 4 the rest of the main loop, 5 the epilogue (o and lse written).
constexpr int kItemSegments = 6;
// Segment 0 of the one-item kernel split at its steps (head_lap; the report's "head" line): 0 the barriers'
// initialisation (where thread 0 does it: the decode tiling; the wide tilings' producer lane does it instead), 1 the
// mask word (wide tilings) and tau / mu loads issued, 2 the Q copy issued, 3 the union zeroed, 4 the first block
// barrier (3 and 4 empty where the union is staged, AttendItem::union_token_words), 5 thread 0's warp's token's union
// (its mask loads), 6 the second barrier (the slowest warp's union), 7 the count (Q by cp.async: and the wait for
// thread 0's Q copies), 8 the third barrier and the plan.
constexpr int kHeadSegments = 9;
#ifdef DASHATTN_ITEM_CLOCKS
// Per translation unit (static): each attention instance's kernels and its report share one copy; an inline kernel
// would be deduplicated across units and read another unit's counters.
static __device__ unsigned long long g_item_cycles[kItemSegments];
static __device__ unsigned long long g_item_count;
static __device__ unsigned long long g_head_cycles[kHeadSegments];
// Each warp's own clock at the head's block barriers (ItemClock::warp_mark: lane 0 of warp w notes its cycles since
// its own entry, added here at its exit): 0 arriving at the staging barrier, 1 arriving at the plan's barrier, 2
// leaving it, so that the report shows which warp each barrier waits for (thread 0's laps show only warp 0's path).
constexpr int kWarpMarks = 3;
constexpr int kMaxClockWarps = 16;
static __device__ unsigned long long g_warp_cycles[kWarpMarks][kMaxClockWarps];
// The bias table's segments (fill_bias_table, staged columns; thread 0's view, summed over rounds): 0 the column
// copies issued, 1 their wait and the consumers' barrier, 2 the entries computed and written.
constexpr int kTableSegments = 3;
static __device__ unsigned long long g_table_cycles[kTableSegments];
// Summed in registers and added at the end of its scope, as ItemClock below is (and for its reason).
struct TableClock {
  long long t = 0;
  unsigned seg[kTableSegments] = {};
  bool took = false;
  __device__ __forceinline__ void start() { t = clock64(); }
  __device__ __forceinline__ void lap(int s) {
    const long long now = clock64();
    seg[s] += static_cast<unsigned>(now - t);
    t = now;
    took = true;
  }
  __device__ __forceinline__ ~TableClock() {
    if (took)
      for (int i = 0; i < kTableSegments; ++i) atomicAdd(&g_table_cycles[i], static_cast<unsigned long long>(seg[i]));
  }
};
// Every thread starts it; thread 0 alone takes the laps, and lane 0 of each warp its warp's marks. The cycles are
// summed in registers and added to the globals by the destructor, once the thread is done with the CTA's work: an
// atomic in the head would be waited for by the next fence.proxy.async (its MEMBAR.ALL.CTA waits for the thread's
// outstanding memory operations), which lengthened the very segments being timed by ~0.7 K cycles per warp.
// (32-bit sums: a CTA's segments are far below 2^32 cycles, and half the registers keep the build's spills down.)
struct ItemClock {
  long long t = 0, th = 0, entry = 0;
  unsigned seg[kItemSegments] = {};
  unsigned head[kHeadSegments] = {};
  unsigned marks[kWarpMarks] = {};
  unsigned items = 0;
  __device__ __forceinline__ void start() { t = th = entry = clock64(); }
  __device__ __forceinline__ void warp_mark(int k, int lane) {
    if (lane == 0) marks[k] = static_cast<unsigned>(clock64() - entry);
  }
  __device__ __forceinline__ void lap(int s) {
    const long long now = clock64();
    seg[s] += static_cast<unsigned>(now - t);
    t = now;
  }
  __device__ __forceinline__ void head_lap(int s) {
    const long long now = clock64();
    head[s] += static_cast<unsigned>(now - th);
    th = now;
  }
  __device__ __forceinline__ void item_done() { ++items; }
  // At the thread's exit, whichever return it takes (a no-op for threads without laps or marks).
  __device__ __forceinline__ ~ItemClock() {
    const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32);
    if (lane == 0 && warp < kMaxClockWarps)
      for (int k = 0; k < kWarpMarks; ++k)
        if (marks[k] != 0) atomicAdd(&g_warp_cycles[k][warp], static_cast<unsigned long long>(marks[k]));
    if (items != 0) {
      for (int i = 0; i < kItemSegments; ++i) atomicAdd(&g_item_cycles[i], static_cast<unsigned long long>(seg[i]));
      for (int i = 0; i < kHeadSegments; ++i) atomicAdd(&g_head_cycles[i], static_cast<unsigned long long>(head[i]));
      atomicAdd(&g_item_count, static_cast<unsigned long long>(items));
    }
  }
};
static __global__ void item_clock_report() {
  const double n = double(g_item_count > 0 ? g_item_count : 1);
  printf("items %llu, mean cycles per item: union %.0f prep %.0f table %.0f first-tile %.0f loop %.0f epilogue %.0f\n",
         g_item_count, g_item_cycles[0] / n, g_item_cycles[1] / n, g_item_cycles[2] / n, g_item_cycles[3] / n,
         g_item_cycles[4] / n, g_item_cycles[5] / n);
  printf("head %.0f / %.0f / %.0f / %.0f / %.0f / %.0f / %.0f / %.0f / %.0f "
         "(init / tau-mu / q issue / zero / barrier / union / barrier / q / plan)\n",
         g_head_cycles[0] / n, g_head_cycles[1] / n, g_head_cycles[2] / n, g_head_cycles[3] / n, g_head_cycles[4] / n,
         g_head_cycles[5] / n, g_head_cycles[6] / n, g_head_cycles[7] / n, g_head_cycles[8] / n);
  printf("table %.0f / %.0f / %.0f (issue / wait / compute)\n", g_table_cycles[0] / n, g_table_cycles[1] / n,
         g_table_cycles[2] / n);
  static const char* const kMarkNames[kWarpMarks] = {"at the staging barrier", "at the plan's barrier",
                                                      "past the plan's barrier"};
  for (int k = 0; k < kWarpMarks; ++k) {
    printf("warps %s:", kMarkNames[k]);
    for (int w = 0; w < kMaxClockWarps; ++w) {
      if (g_warp_cycles[k][w] != 0) printf(" %.0f", g_warp_cycles[k][w] / n);
      g_warp_cycles[k][w] = 0;
    }
    printf("\n");
  }
  for (int i = 0; i < kTableSegments; ++i) g_table_cycles[i] = 0;
  for (int i = 0; i < kItemSegments; ++i) g_item_cycles[i] = 0;
  for (int i = 0; i < kHeadSegments; ++i) g_head_cycles[i] = 0;
  g_item_count = 0;
}
#else
struct TableClock {
  __device__ __forceinline__ void start() {}
  __device__ __forceinline__ void lap(int) {}
};
struct ItemClock {
  __device__ __forceinline__ void start() {}
  __device__ __forceinline__ void warp_mark(int, int) {}
  __device__ __forceinline__ void lap(int) {}
  __device__ __forceinline__ void head_lap(int) {}
  __device__ __forceinline__ void item_done() {}
};
#endif

// Profiling build only (-DDASHATTN_ROUTE_PHASE_CLOCKS), Stage 1's single-sweep kernel: cycles per phase summed over
// blocks (thread 0's clock after each phase's barrier) and the blocks that overflowed to the multi-pass code; the
// first launch to finish prints them. Every thread of a block calls mark() (it holds a barrier) and finish().
#ifdef DASHATTN_ROUTE_PHASE_CLOCKS
__device__ unsigned long long g_route_phase_cycles[8];
__device__ unsigned int g_route_phase_blocks;
__device__ unsigned int g_route_phase_printed;
__device__ unsigned int g_route_phase_overflowed;
struct RoutePhaseClock {
  long long t = 0;
  __device__ RoutePhaseClock() {
#ifdef __CUDA_ARCH__  // the host pass sees this constructor's body too
    t = clock64();
#endif
  }
  __device__ void mark(int i) {
    __syncthreads();
    if (threadIdx.x == 0) {
      const long long now = clock64();
      atomicAdd(&g_route_phase_cycles[i], static_cast<unsigned long long>(now - t));
      t = now;
    }
  }
  __device__ void finish(bool overflowed) {
    if (threadIdx.x != 0) return;
    if (overflowed) atomicAdd(&g_route_phase_overflowed, 1u);
    __threadfence();
    const unsigned int done = atomicAdd(&g_route_phase_blocks, 1u) + 1u;
    if (done == gridDim.x * gridDim.y * gridDim.z && atomicExch(&g_route_phase_printed, 1u) == 0u) {
      printf("route_fast phases (cycles summed over %u blocks): "
             "setup %llu maxima %llu lists %llu solve %llu emit %llu; %u blocks overflowed to the multi-pass code\n",
             done, g_route_phase_cycles[0], g_route_phase_cycles[1], g_route_phase_cycles[2], g_route_phase_cycles[3],
             g_route_phase_cycles[4], g_route_phase_overflowed);
    }
  }
};
#else
struct RoutePhaseClock {
  __device__ void mark(int) {}
  __device__ void finish(bool) {}
};
#endif

}  // namespace dashattn::cuda
