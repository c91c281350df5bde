// Profiling build only (-DDASHATTN_ATTEND_PHASE_CLOCKS): timestamps of the Stage-2 kernel's phases, for finding
// where a short launch (a decode step) spends its time. Without the macro DASHATTN_ATTEND_MARK is empty.
#pragma once

#include <cstdint>
#include <cstdio>

// Thread 0 of each CTA stamps the global timer at fixed points (entry, union built, counts ready, tau / mu loaded,
// first x = Q k̄^T of the bias table, table done, first tile arrived, loop done, rows written); the last CTA to
// finish prints, over the CTAs that attended a tile, the mean and the maximum of every stamp after the earliest
// entry of the launch, in ns. Measured this way on an H100 (perf-log.md): a 64K decode step's Stage 2 spends ~2 us
// before its tile stream starts and ~4 us after its last tile; its table's loads wait behind the stream.
#ifdef DASHATTN_ATTEND_PHASE_CLOCKS
namespace dashattn::cuda {
constexpr int kPhaseMarks = 9, kPhaseMaxCtas = 4096;
__device__ unsigned long long g_attend_phase[kPhaseMaxCtas][kPhaseMarks];
__device__ int g_attend_phase_tiles[kPhaseMaxCtas];
__device__ unsigned int g_attend_phase_done;
__device__ __forceinline__ unsigned long long phase_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int phase_cta() {
  return int((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
}
__device__ inline void phase_report() {
  const int n = int(gridDim.x * gridDim.y * gridDim.z);
  unsigned long long t0 = ~0ull;
  for (int c = 0; c < n && c < kPhaseMaxCtas; ++c) t0 = g_attend_phase[c][0] < t0 ? g_attend_phase[c][0] : t0;
  double mean[kPhaseMarks] = {};
  unsigned long long mx[kPhaseMarks] = {};
  int used = 0;
  for (int c = 0; c < n && c < kPhaseMaxCtas; ++c) {
    if (g_attend_phase_tiles[c] <= 0) continue;
    ++used;
    for (int i = 0; i < kPhaseMarks; ++i) {
      const unsigned long long d = g_attend_phase[c][i] - t0;
      mean[i] += double(d);
      mx[i] = d > mx[i] ? d : mx[i];
    }
  }
  printf("attend phases (ns after the first entry; %d CTAs with tiles of %d): entry / union / counts / tau-mu / "
         "first x / bias / first tile / loop / written: mean %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f max %llu "
         "%llu %llu %llu %llu %llu %llu %llu %llu\n",
         used, n, mean[0] / used, mean[1] / used, mean[2] / used, mean[7] / used, mean[8] / used, mean[3] / used,
         mean[4] / used, mean[5] / used, mean[6] / used, mx[0], mx[1], mx[2], mx[7], mx[8], mx[3], mx[4], mx[5],
         mx[6]);
}
}  // namespace dashattn::cuda
#define DASHATTN_ATTEND_MARK(i)                                  \
  do {                                                           \
    g_attend_phase[phase_cta() % kPhaseMaxCtas][i] = phase_now(); \
  } while (0)
namespace dashattn::cuda {
__device__ float g_attend_phase_sink;
// Stamp i once v (a loaded or computed value) is ready: the store waits for its register.
__device__ __forceinline__ void phase_mark_ready(int i, float v) {
  g_attend_phase_sink = v;
  DASHATTN_ATTEND_MARK(i);
}
__device__ __forceinline__ void phase_set_tiles(int64_t tiles) {
  g_attend_phase_tiles[phase_cta() % kPhaseMaxCtas] = int(tiles);
}
// Last stamp; the last CTA of the launch prints the report and re-arms the counter.
__device__ __forceinline__ void phase_finish() {
  DASHATTN_ATTEND_MARK(6);
  __threadfence();
  if (atomicAdd(&g_attend_phase_done, 1u) + 1 == gridDim.x * gridDim.y * gridDim.z) {
    __threadfence();
    phase_report();
    g_attend_phase_done = 0;
  }
}
}  // namespace dashattn::cuda
#else
#define DASHATTN_ATTEND_MARK(i) \
  do {                          \
  } while (0)
namespace dashattn::cuda {
__device__ __forceinline__ void phase_mark_ready(int, float) {}
__device__ __forceinline__ void phase_set_tiles(int64_t) {}
__device__ __forceinline__ void phase_finish() {}
}  // namespace dashattn::cuda
#endif
