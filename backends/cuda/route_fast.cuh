// Stage-1 single-sweep kernel (see route.cuh for the contract): the summaries stream through the block once, the
// tensor-core scores are listed against each row's running maximum, the exact τ is solved on chip from the
// candidate lists, and the mask, μ and active counts are emitted from the same lists (route_emit.cuh), with no
// further look at the summaries.
//
// Why the lists suffice: τ ≥ m − 1 for a row with maximum m, so only x > m − 1 can carry weight, and a chunk's
// group weight is non-zero only if it is a candidate of some head. The sweep appends x > m' − 1 − margin with the
// chunk id to a per-row list, where m' is the row's maximum over the chunks scored so far (m' ≤ m, so the list
// holds every final candidate, plus stale entries that the row's maximum later overtook; they are dropped before
// the solve). Entries go in chunk order, except that a full block lists a 16-chunk sub-tile quad lane by quad
// lane (queue_push / queue_drain); the solve and the emit do not depend on the order. A list about to overflow is
// first compacted against the current maximum; a row whose candidates still do not fit makes the block route itself
// with the multi-pass algorithm (route_block, route_kernels.cuh), from scratch, or in the instance launched for
// long sequences hand itself to the multi-pass kernel. (On the synthetic benchmark
// problem at 64K tokens a row lists 2.6 final candidates and 6.9 entries in all on average, at most 36 of the 44
// that fit.)
//
// Summary tiles of 64 chunks stream through a cp.async ring of `stages` buffers. Block rows are laid out as in
// the multi-pass kernel (row = token·g + head, each warp two m16 tiles at head dim ≤ 128). A block with no more
// rows than one warp holds (decode: one token) splits the chunk axis instead: every warp scores the same rows on
// its own 16-chunk sub-tile of each tile and keeps its own list segment, so the four warps sweep a quarter each.
// A split block sweeps twice (a maximum pass, then a listing pass against the rows' final maxima): its warps'
// segments would otherwise each list against a segment's own, lower maximum.
//
// Group weights are accumulated per chunk in head order from 0, exactly as dashattn::group_weight sums them, so
// the bits and μ match the multi-pass kernel's. Every reduction has a fixed order: results are reproducible.
#pragma once

#include <cmath>
#include <cstdint>

#include "dashattn/entmax.h"
#include "dashattn/prior.h"
#include "mma_sm80.cuh"
#include "phase_clocks.cuh"
#include "route_kernels.cuh"
#include "route_emit.cuh"
#include "route_lists.cuh"

namespace dashattn {
namespace cuda {
namespace route_detail {

constexpr int kStageChunks = 64;   // chunks per pipelined summary tile
constexpr int kSubChunks = 16;     // chunks per MMA sub-tile (two n8 tiles)
constexpr int kSubTiles = kStageChunks / kSubChunks;
// Candidates per list column (value f32 + chunk id u16), chosen per launch: small for prefill so that three
// blocks share a multiprocessor, large for decode, whose few blocks each see every chunk of their sequence.
// A column's entries are contiguous, columns cap + 1 apart (odd), so that one thread per column (the solver)
// and one warp along a column (the emit) both reach 32 different banks. The prefill cap went from 48 to 44 to make
// room for the listing queues at three blocks per multiprocessor.
constexpr int kPrefillListCap = 44;
constexpr int kDecodeListCap = 96;
constexpr int kMaxStages = 4;
constexpr int kMaxListChunk = 65535;  // chunk ids are stored in 16 bits
static_assert(kSubTiles == kWarps, "split blocks give one sub-tile of every tile to each warp");

template <int kHeadDim>
struct FastSmem {
  using C = Config<kHeadDim>;
  static constexpr size_t kStageBytes = size_t(kStageChunks) * C::kTileStride * 2;
  __host__ __device__ static size_t val_bytes(int cap) { return (size_t(cap + 1) * C::kRows * 4 + 15) / 16 * 16; }
  __host__ __device__ static size_t id_bytes(int cap) { return (size_t(cap + 1) * C::kRows * 2 + 15) / 16 * 16; }
  static constexpr size_t kRowBytes = size_t(C::kRows) * 4 * 4;  // column counts and maxima, row limits, row τ
  // A full block's listing queues: per warp 32 pairs of four scores and (row, first chunk, threshold, limit).
  static constexpr size_t kListingBytes = size_t(kWarps) * 32 * (16 + 16);
  // in_place (the instance whose overflowing blocks route themselves, route_block): at least the multi-pass
  // layout, which such a block reuses; the other instance hands those blocks over and needs only the sweep's.
  static size_t bytes(int stages, int cap, bool in_place) {
    const size_t sweep = size_t(stages) * kStageBytes + val_bytes(cap) + id_bytes(cap) + kRowBytes + kListingBytes;
    return in_place && Smem<kHeadDim>::kBytes > sweep ? Smem<kHeadDim>::kBytes : sweep;
  }
};

// kInPlace: a block whose lists overflow routes itself (route_block_call), else it hands itself over; the launcher
// takes this instance for sequences of up to 1024 chunks. The instance without that call keeps the sweep's
// registers as they were (the call's ABI adds spills to the sweep: 40 / 28 -> 80 / 136 bytes at
// d = 128, which cost long prefills 0.3-0.9 % of Stage 1; perf-log.md, seventeenth pass).
template <int kHeadDim, typename T, bool kInPlace>
__global__ void __launch_bounds__(kThreads, 3) route_fast_kernel(RouteArgs a) {
  RoutePhaseClock phase_clock;
  using C = Config<kHeadDim>;
  using S = FastSmem<kHeadDim>;
  constexpr int kRows = C::kRows, kMT = C::kMTiles, kKS = C::kKSteps;
  constexpr int kWarpRows = kMT * 16;
  constexpr int kVecPerRow = kHeadDim / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  const int stages = a.stages;
  const int cap = a.list_cap, lstride = a.list_cap + 1;
  uint16_t* stage_buf = reinterpret_cast<uint16_t*>(smem);
  float* list_val = reinterpret_cast<float*>(smem + stages * S::kStageBytes);
  uint16_t* list_id = reinterpret_cast<uint16_t*>(smem + stages * S::kStageBytes + S::val_bytes(cap));
  int* col_count =
      reinterpret_cast<int*>(smem + stages * S::kStageBytes + S::val_bytes(cap) + S::id_bytes(cap));
  int* row_limit = col_count + kRows;
  float* row_tau = reinterpret_cast<float*>(row_limit + kRows);
  float* col_max = row_tau + kRows;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // A full block's listing queue (queue_push / queue_drain), one per warp: 32 (lane, row group) pairs, their four
  // raw scores and their row, first chunk, threshold and limit. The scores go in as two 8-byte halves, each an
  // accumulator's register pair as the MMA left it (one 16-byte store needed four register moves per pair; the
  // halves took 1-2 % off Stage 1 on an H100). Layout: all warps' low halves, high halves, then metadata.
  float2* const queues = reinterpret_cast<float2*>(col_max + kRows);
  float2* const queue_lo = queues + warp * 32;
  float2* const queue_hi = queues + kWarps * 32 + warp * 32;
  int4* const queue_meta = reinterpret_cast<int4*>(queues + 2 * kWarps * 32) + warp * 32;
  const int grp = lane >> 2, quad = lane & 3;
  const int g = a.group;
  const int r = blockIdx.y;
  const int64_t seq = blockIdx.z;
  const SequenceSpan sp = device_sequence_span(a.batch, seq);
  // Longest blocks first: a block's sweep grows with its tokens' position (causal), and the last wave of a
  // shortest-first grid was its longest blocks.
  const int64_t tok0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * a.tokens_per_block;
  const int64_t owned_rows = a.batch.cu_seqlens_q != nullptr ? sp.n_q : a.batch.padded_n_q;
  if (tok0 >= owned_rows) return;
  const int tokens =
      static_cast<int>(owned_rows - tok0 < a.tokens_per_block ? owned_rows - tok0 : int64_t(a.tokens_per_block));
  const int rows_used = tokens * g;

  for (int rho = tid; rho < kRows; rho += kThreads) {
    row_limit[rho] = routable_chunks(a, sp, tok0, rho, rows_used, g);
    col_count[rho] = 0;
  }
  const int64_t last_real = (tok0 + tokens < sp.n_q ? tok0 + tokens : sp.n_q) - 1;
  const int64_t cmax64 =
      last_real >= tok0 ? query_diagonal_chunk(a, sp, last_real) : 0;
  const int cmax = static_cast<int>(cmax64 < kMaxListChunk + 1 ? cmax64 : kMaxListChunk + 1);
  const int ntiles = (cmax + kStageChunks - 1) / kStageChunks;
  // Split block: all warps take rows 0..kWarpRows−1, warp w the sub-tile w of every tile.
  const bool split = rows_used <= kWarpRows;
  const int row_base = split ? 0 : warp * kWarpRows;
  const int col_base = warp * kWarpRows;  // this warp's list columns

  // Q rows staged through the (still idle) tile buffers with 16-byte copies, then read as A fragments with
  // ldmatrix: all loads in flight at once. Rows without a query read as zeros.
  static_assert(size_t(C::kRows) * C::kTileStride * 2 <= 2 * S::kStageBytes, "Q fits in two tile buffers");
  // Thread tid copies the 16-byte pieces tid + k·kThreads of Q and of every summary tile below: they share one
  // column (kThreads is a multiple of the pieces per row) and step kRowStep rows at a time.
  static_assert(kThreads % kVecPerRow == 0, "a thread's pieces share one column");
  constexpr int kRowStep = kThreads / kVecPerRow;
  const int piece_row = tid / kVecPerRow, piece_col = (tid % kVecPerRow) * 8;
  {
    // The row's token, head and element offset advance with it by adds: a 64-bit DeviceTensor offset per piece
    // (three 64-bit products) made this loop ~4 % of the kernel's executed instructions (Nsight Compute, 64K).
    const T* const q_first = a.q.ptr<T>(sp.batch_index, sp.q_begin + tok0, int64_t(r) * g, piece_col);
    const int64_t tok_stride = a.q.stride[1], head_stride = a.q.stride[2];
    const int head_step = kRowStep % g;
    const int64_t step_offset = (kRowStep / g) * tok_stride + head_step * head_stride;
    const int64_t wrap_offset = tok_stride - g * head_stride;  // head g -> head 0 of the next token
    // Rows rho < valid_rows have a query: rho < rows_used and token rho / g < n_q - tok0 (padded rows have none).
    const int valid_rows =
        static_cast<int>(::min(int64_t(rows_used), ::max(sp.n_q - tok0, int64_t(0)) * g));
    int head = piece_row % g;
    int64_t offset = (piece_row / g) * tok_stride + head * head_stride;
    for (int rho = piece_row; rho < kRows; rho += kRowStep) {
      const bool valid = rho < valid_rows;
      cp_async_16(stage_buf + rho * C::kTileStride + piece_col, valid ? q_first + offset : q_first, valid ? 16 : 0);
      head += head_step;
      offset += step_offset;
      if (head >= g) {
        head -= g;
        offset += wrap_offset;
      }
    }
    cp_async_commit();
    cp_async_wait(0);
  }
  __syncthreads();
  uint32_t qf[kMT][kKS][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const uint16_t* arow = stage_buf + (row_base + mt * 16 + (lane & 15)) * C::kTileStride + (lane >> 4) * 8;
#pragma unroll
    for (int ks = 0; ks < kKS; ++ks) ldmatrix_x4(qf[mt][ks], arow + ks * 16);
  }
  __syncthreads();  // the tile buffers are free again
  phase_clock.mark(0);  // setup, Q
  int lim[kMT][2];
  bool mt_active[kMT];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) lim[mt][h] = row_limit[row_base + mt * 16 + grp + 8 * h];
    mt_active[mt] = __any_sync(0xffffffffu, lim[mt][0] > 0 || lim[mt][1] > 0);
  }
  // The smallest limit of the warp's rows: a pair of sub-tiles below it needs no limit test in any row (every pair
  // of a full block but each row's last; a warp with a padding row, limit 0, always tests).
  int warp_min_lim = lim[0][0];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) warp_min_lim = min(warp_min_lim, lim[mt][h]);
  warp_min_lim = __reduce_min_sync(0xffffffffu, warp_min_lim);

  // The next tile of the sweep (tiles 0 .. ntiles − 1, twice) into the next ring buffer; chunks past cmax read as
  // zeros. Each of a thread's pieces is one add from the last: with a 64-bit index product per piece and a modulo
  // per tile, the copy took an eighth of the kernel's issue slots (Nsight Compute, 64K prefill).
  constexpr int kPieces = kStageChunks / kRowStep;
  const int64_t piece_step = int64_t(kRowStep) * a.summaries.stride[1];
  const int64_t tile_step = int64_t(kStageChunks) * a.summaries.stride[1];
  const T* const first_src = a.summaries.ptr<T>(seq, piece_row, r, piece_col);
  const T* const zero_src = a.summaries.ptr<T>(seq, 0, r, 0);  // any valid address: nothing is read from it
  int load_tl = 0, load_buf = 0;
  const T* load_src = first_src;
  auto load_next = [&]() {
    const int row0 = load_tl * kStageChunks + piece_row;
    uint16_t* dst = stage_buf + size_t(load_buf) * (S::kStageBytes / 2) + piece_row * C::kTileStride + piece_col;
    const T* src = load_src;
#pragma unroll
    for (int k = 0; k < kPieces; ++k) {
      const bool in = row0 + k * kRowStep < cmax;
      cp_async_16(dst + k * kRowStep * C::kTileStride, in ? src : zero_src, in ? 16 : 0);
      src += piece_step;
    }
    if (++load_tl == ntiles) {
      load_tl = 0;
      load_src = first_src;
    } else {
      load_src += tile_step;
    }
    if (++load_buf == stages) load_buf = 0;
  };

  // ---- The sweep: one pass over the tiles (a split block: two, as one stream of 2·ntiles steps) ----
  // Full blocks score each pair of sub-tiles, raise every row's running maximum over the pair's routable chunks
  // (the lane maxima reduced over the row's quad), and list the pair's x > candidate_threshold(maximum). A split
  // block's pass A keeps each lane's maximum over the routable chunks of its rows (no communication until its
  // end) and its pass B scores the tiles again (the summaries are L2-resident) against the final maxima.
  // candidate_threshold is non-decreasing in m (below 2^24), so a running maximum never drops a final candidate.
  // Per row, `bound` is the (running) maximum of the unscaled dot products; a split block turns it in place into
  // the candidate threshold for pass B (one register set for both keeps the sweep free of spills).
  float bound[kMT][2];
  int cnt[kMT][2];  // > cap: the row overflowed
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bound[mt][h] = -INFINITY;
      cnt[mt][h] = 0;
    }
  int overflow = cmax > kMaxListChunk;  // block-uniform
  int lane_overflow = 0;                // a full block's row this lane listed into overflowed
  // A full block's listing, part two: a lane per queued pair lists it. The pairs of a row share its list (in one
  // drain they may come from several sub-tiles): the lanes holding the row's pairs find each other with a match,
  // each takes its offset from the candidates of the row's pairs queued before it, and the row's first pair
  // reserves the row's space (compacting the list first when it would overflow) and hands out the base. A row's
  // entries are in chunk order across sub-tiles and in quad order within one (the solve and the emit need no
  // order; the order is fixed, so results are reproducible). Listing a sub-tile's pairs at once ran this part once
  // per sub-tile, nearly always (a warp's 32 rows list ~7 pairs per sub-tile); a queue of 32 runs it about every
  // third to fifth.
  constexpr int kQueue = 32;
  int queued = 0;  // warp-uniform: pairs in the warp's queue
  auto queue_drain = [&]() {
    __syncwarp();  // the queue's entries are visible
    int row = -1 - lane;  // lanes without a pair: a row of their own
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    bool p[4] = {false, false, false, false};
    int id0 = 0;
    float t = 0.0f;
    if (lane < queued) {
      const float2 lo = queue_lo[lane], hi = queue_hi[lane];
      const int4 meta = queue_meta[lane];
      row = meta.x;
      id0 = meta.y;
      t = __int_as_float(meta.z);
      x[0] = lo.x * a.x_scale;
      x[1] = lo.y * a.x_scale;
      x[2] = hi.x * a.x_scale;
      x[3] = hi.y * a.x_scale;
#pragma unroll
      for (int e = 0; e < 4; ++e) p[e] = id0 + (e >> 1) * 8 + (e & 1) < meta.w && x[e] > t;
    }
    const unsigned same = __match_any_sync(0xffffffffu, row);
    const unsigned before_mask = same & ((1u << lane) - 1u);
    int before = 0, need = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const unsigned b = __ballot_sync(0xffffffffu, p[e]);
      before += __popc(b & before_mask);
      need += __popc(b & same);
    }
    const int first_lane = __ffs(same) - 1;
    int base = 0;
    if (lane < queued && first_lane == lane) {
      const int lbase = row * lstride;
      int c = col_count[row];
      if (c <= cap && c + need > cap) {
        // Rare: drop the entries the maximum has since overtaken (they cannot carry weight), then retry; still
        // too many and the row overflows (the block goes to the multi-pass kernel). The first pair's threshold is
        // the row's lowest in the drain, so nothing that can carry weight is dropped.
        c = compact_list(list_val + lbase, list_id + lbase, c, t);
        if (c + need > cap) c = cap + 1;
      }
      base = c;
      col_count[row] = c <= cap ? c + need : cap + 1;
    }
    // The leader's compaction read and moved entries that the row's other lanes now overwrite (a shuffle does not
    // order memory).
    __syncwarp();
    base = __shfl_sync(0xffffffffu, base, first_lane);
    if (lane < queued) {
      if (base <= cap) {
        int slot = row * lstride + base + before;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (p[e]) {
            list_val[slot] = x[e];
            list_id[slot] = static_cast<uint16_t>(id0 + (e >> 1) * 8 + (e & 1));
          }
          slot += p[e] ? 1 : 0;
        }
      } else {
        lane_overflow = 1;
      }
    }
    __syncwarp();  // the queue may be refilled
    queued = 0;
  };
  const int steps = overflow ? 0 : (split ? 2 : 1) * ntiles;
  for (int s = 0; s + 1 < stages; ++s) {
    if (s < steps) load_next();
    cp_async_commit();
  }
  const unsigned quad_mask = 0xfu << (lane & ~3);
  int read_buf = 0;  // ring buffer of step v
  for (int v = 0; v < steps; ++v) {
    cp_async_wait(stages - 2);
    int row_overflow = 0;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) row_overflow |= cnt[mt][h] > cap;
    row_overflow |= lane_overflow;
    // Step v visible to all; buffer (v − 1) % stages free; the maxima of pass A published (split blocks).
    if (__syncthreads_or(row_overflow)) {
      overflow = 1;
      break;
    }
    if (v + stages - 1 < steps) load_next();
    cp_async_commit();
    const bool listing = !split || v >= ntiles;  // a split block's pass B
    const int tl = split && listing ? v - ntiles : v;
    if (split && v == ntiles) {
      phase_clock.mark(1);  // pass A
      // A split row's maximum is over all segments (fmaxf: the order of the segments does not matter).
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float m = -INFINITY;
#pragma unroll
          for (int s = 0; s < kWarps; ++s) m = fmaxf(m, col_max[s * kWarpRows + mt * 16 + grp + 8 * h]);
          bound[mt][h] = candidate_threshold(m);
        }
    }
    const uint16_t* tile = stage_buf + size_t(read_buf) * (S::kStageBytes / 2);
    if (++read_buf == stages) read_buf = 0;
    auto brow_of = [&](int sub) {
      return tile + (sub * kSubChunks + ((lane >> 4) << 3) + (lane & 7)) * C::kTileStride + ((lane >> 3) & 1) * 8;
    };
    // Element (mt, n, i) of a scored sub-tile (chunks c0 .. c0 + 15): row half h = i / 2, chunk
    // c0 + n·8 + 2·quad + (i & 1). This lane's maxima `m` over the routable chunks (fmaxf drops NaN scores), of
    // the unscaled dot products: the launch guarantees x_scale > 0, and rounding x·s is non-decreasing in x, so
    // max(x)·s is exactly max(x·s). Sub-tiles whose chunks are all routable for a row need no limit test.
    // This lane's maximum over the four values of row group (mt, h) of a sub-tile, without a limit test.
    auto group_max = [&](const float (&acc)[kMT][2][4], int mt, int h) {
      return fmaxf(fmaxf(acc[mt][0][2 * h], acc[mt][0][2 * h + 1]), fmaxf(acc[mt][1][2 * h], acc[mt][1][2 * h + 1]));
    };
    auto max_epilogue = [&](const float (&acc)[kMT][2][4], int c0, float (&m)[kMT][2]) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (c0 + kSubChunks <= lim[mt][h]) {
            m[mt][h] = fmaxf(m[mt][h], group_max(acc, mt, h));
          } else {
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int j = 0; j < 2; ++j)
                if (c0 + n * 8 + quad * 2 + j < lim[mt][h]) m[mt][h] = fmaxf(m[mt][h], acc[mt][n][2 * h + j]);
          }
        }
    };
    // A split block's listing: append the candidates x > thr to the row's list (the quad's lanes share it) in
    // chunk order. They are few (a handful per row out of up to a thousand chunks), so the quad exchange and the
    // stores run only when some lane of the warp has one.
    auto list_epilogue = [&](float (&acc)[kMT][2][4], int c0, const float (&thr)[kMT][2]) {
      uint32_t lb[kMT][2];
      bool any_cand = false;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          lb[mt][h] = 0u;
          const bool interior = c0 + kSubChunks <= lim[mt][h];
#pragma unroll
          for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const int col = n * 8 + quad * 2 + j;
              acc[mt][n][2 * h + j] *= a.x_scale;
              if ((interior || c0 + col < lim[mt][h]) && acc[mt][n][2 * h + j] > thr[mt][h]) lb[mt][h] |= 1u << col;
            }
          any_cand = any_cand || lb[mt][h] != 0u;
        }
      if (__any_sync(0xffffffffu, any_cand)) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t bits = lb[mt][h];
            bits |= __shfl_xor_sync(0xffffffffu, bits, 1);
            bits |= __shfl_xor_sync(0xffffffffu, bits, 2);
            if (bits == 0u || cnt[mt][h] > cap) continue;  // quad-uniform
            const int add = __popc(bits);
            const int col_idx = col_base + mt * 16 + grp + 8 * h;
            if (cnt[mt][h] + add > cap) {
              // Rare: the quad's first lane drops the entries that the maximum has since overtaken (they cannot
              // carry weight), keeping the list's order; then retry. Still too many: the row overflows.
              __syncwarp(quad_mask);  // the quad's earlier stores to this list are visible
              const int kept = quad == 0 ? compact_list(list_val + col_idx * lstride, list_id + col_idx * lstride,
                                                        cnt[mt][h], thr[mt][h])
                                         : 0;
              __syncwarp(quad_mask);  // the compacted list is visible before the quad appends to it
              cnt[mt][h] = __shfl_sync(quad_mask, kept, lane & ~3);
              if (cnt[mt][h] + add > cap) {
                cnt[mt][h] = cap + 1;
                continue;
              }
            }
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                const int col = n * 8 + quad * 2 + j;
                if (bits & (1u << col)) {
                  const int slot = cnt[mt][h] + __popc(bits & ((1u << col) - 1u));
                  list_val[col_idx * lstride + slot] = acc[mt][n][2 * h + j];
                  list_id[col_idx * lstride + slot] = static_cast<uint16_t>(c0 + col);
                }
              }
            cnt[mt][h] += add;
          }
      }
    };
    // A full block's listing, part one. Only the (lane, row group) pairs that hold a candidate are queued: a lane
    // has one in row group (mt, h) iff its maximum over the group's four values passes the row's threshold (x·s
    // rounds non-decreasingly in x, so max(x)·s > thr iff some x·s > thr), about one pair in twenty on the benchmark
    // problem. They go to the warp's queue in shared memory, row group by row group and lane by lane, after the
    // pairs of the earlier sub-tiles; queue_drain (part two) lists a full queue, and the rest at the sweep's end.
    // A pair of sub-tiles (chunks c0 .. c0 + 31) is pushed at once, the first sub-tile's pairs before the second's
    // (the order of two pushes, so the queue and its drains are the same): one rank pass and one store loop per pair.
    // Past cmax the second sub-tile's maxima stay −∞ (every chunk is past every row's limit) and it queues nothing.
    auto queue_push = [&](const float (&acc0)[kMT][2][4], const float (&acc1)[kMT][2][4], int c0,
                          const float (&lm0)[kMT][2], const float (&lm1)[kMT][2], const float (&thr)[kMT][2]) {
      // fn(sub, mt, h) for the pair's row groups in queue order (unrolled: the indices are constants).
      auto for_each_group = [&](auto&& fn) {
#pragma unroll
        for (int sub = 0; sub < 2; ++sub)
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) fn(sub, mt, h);
      };
      const unsigned below = (1u << lane) - 1u;
      int rank[2][kMT][2];  // −1: no pair
      int total = 0;
      for_each_group([&](int sub, int mt, int h) {
        const bool has = (sub ? lm1 : lm0)[mt][h] * a.x_scale > thr[mt][h];
        const unsigned b = __ballot_sync(0xffffffffu, has);
        rank[sub][mt][h] = has ? total + __popc(b & below) : -1;
        total += __popc(b);
      });
      // Pairs r0 .. r0 + take − 1 at the queue's end; a full queue is listed before the rest go in.
      for (int r0 = 0; r0 < total;) {
        const int take = total - r0 < kQueue - queued ? total - r0 : kQueue - queued;
        for_each_group([&](int sub, int mt, int h) {
          const int rk = rank[sub][mt][h] - r0;  // (r0 >= 0: rk >= 0 holds only for a lane with a pair)
          if (rk >= 0 && rk < take) {
            const float (&acc)[kMT][2][4] = sub ? acc1 : acc0;
            queue_lo[queued + rk] = make_float2(acc[mt][0][2 * h], acc[mt][0][2 * h + 1]);
            queue_hi[queued + rk] = make_float2(acc[mt][1][2 * h], acc[mt][1][2 * h + 1]);
            queue_meta[queued + rk] = make_int4(col_base + mt * 16 + grp + 8 * h, c0 + sub * kSubChunks + 2 * quad,
                                                __float_as_int(thr[mt][h]), lim[mt][h]);
          }
        });
        queued += take;
        r0 += take;
        if (queued == kQueue) queue_drain();
      }
    };
    if (split) {
      const int c0 = tl * kStageChunks + warp * kSubChunks;
      if (c0 < cmax) {
        float acc[kMT][2][4];
        score_subtile<T>(acc, qf, mt_active, brow_of(warp));
        if (listing) list_epilogue(acc, c0, bound);
        else max_epilogue(acc, c0, bound);
      }
    } else {
      // Two sub-tiles scored before either epilogue: their MMA chains overlap (the epilogues still run in chunk
      // order). Past cmax the tile buffer holds zeros and every chunk is past every row's limit, so the second
      // score is always safe to compute and never raises a maximum.
#pragma unroll 1
      for (int sub = 0; sub < kSubTiles; sub += 2) {
        const int c0 = tl * kStageChunks + sub * kSubChunks;
        if (c0 >= cmax) break;
        float acc0[kMT][2][4], acc1[kMT][2][4];
        score_subtile<T>(acc0, qf, mt_active, brow_of(sub));
        score_subtile<T>(acc1, qf, mt_active, brow_of(sub + 1));
        // Each lane's maxima of the two sub-tiles per row group, kept apart for queue_push.
        float lm0[kMT][2], lm1[kMT][2];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) lm0[mt][h] = lm1[mt][h] = -INFINITY;
        if (c0 + 2 * kSubChunks <= warp_min_lim) {
          // Both sub-tiles routable in every row (warp-uniform): the maxima without limit tests, one straight block
          // for the two sub-tiles. max_epilogue's interior path would also fold in the starting −∞, which changes a
          // result only where all four values are NaN (NaN here, −∞ there); the row maximum (fmaxf with the running
          // bound, itself never NaN) and queue_push's test (false either way) do not tell the two apart.
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              lm0[mt][h] = group_max(acc0, mt, h);
              lm1[mt][h] = group_max(acc1, mt, h);
            }
        } else {
          max_epilogue(acc0, c0, lm0);
          max_epilogue(acc1, c0 + kSubChunks, lm1);
        }
        float thr[kMT][2];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            bound[mt][h] = quad_max(fmaxf(bound[mt][h], fmaxf(lm0[mt][h], lm1[mt][h])));
            thr[mt][h] = candidate_threshold(bound[mt][h] * a.x_scale);
          }
        queue_push(acc0, acc1, c0, lm0, lm1, thr);
      }
    }
    if (split && v == ntiles - 1) {
      // End of a split block's pass A: the row maxima over the quad; the segment maxima go to every warp through
      // the barrier at the top of the next step.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float m = quad_max(bound[mt][h]) * a.x_scale;
          if (quad == 0) col_max[col_base + mt * 16 + grp + 8 * h] = m;
        }
    }
  }
  if (!split && !overflow && queued > 0) queue_drain();  // (warp-uniform)
  cp_async_wait(0);
  {
    int row_overflow = 0;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) row_overflow |= cnt[mt][h] > cap;
    overflow = __syncthreads_or(overflow | row_overflow | lane_overflow);
  }
  phase_clock.mark(2);  // pass B

  if (overflow) {
    if constexpr (kInPlace) {
      // The multi-pass algorithm redoes this block here, in the same shared memory (the launch gives the kernel at
      // least Smem::kBytes), so that no second launch is needed: one that only checks marks cost ~30 us at 64K
      // tokens (~16K blocks that each read a mark and exit; perf-log.md, seventeenth pass).
      __syncthreads();  // every thread is done with the lists and the tile buffers
      route_block_call<kHeadDim, T>(a, tok0, r, seq, smem);
    } else {
      // A block of a long sequence goes to the multi-pass kernel, whose launch has the registers its solve needs
      // (in place, under this kernel's bound, the 1M-token prefill took 6.35 s instead of 6.19). The mark goes to
      // every row so that the first one carries it.
      for (int rho = tid; rho < rows_used; rho += kThreads)
        *row_tau_ptr(a, sp, r, g, tok0, rho) = __uint_as_float(kHandOverTauBits);
    }
    phase_clock.finish(true);
    return;
  }
  if (quad == 0) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int col = col_base + mt * 16 + grp + 8 * h;
        // A split block's list length (a full block's is in col_count already); a full block's final row maximum
        // (a split block's col_max holds its segments' maxima already).
        if (split) col_count[col] = cnt[mt][h];
        else col_max[col] = bound[mt][h] * a.x_scale;
      }
  }
  __syncthreads();
  // ---- Exact τ per row from its list (segments in warp order for a split block) ----
  for (int rho = tid; rho < rows_used; rho += kThreads) {
    float tau = NAN;
    if (row_limit[rho] > 0) {
      if (!split) {
        // Drop the stale entries, listed before the row's maximum rose past them: what remains is exactly
        // x > candidate_threshold(final maximum), the entries a maximum pass followed by a listing pass would list,
        // so τ and the emit see the same values. (Left in, the stale entries, ~2.7 times the candidates on the
        // benchmark problem, made the solve and the emit slower than the saved pass.) The exact solve's first pass
        // is formed as the kept entries go by.
        //
        // The list is then one contiguous array (the segmented view costs every entry of every solve pass a
        // segment lookup; perf-log.md, eleventh pass). Its largest value is the row's maximum (max(x)·s is exactly
        // max(x·s), and a non-empty list holds the maximum itself: an infinite maximum's threshold is NaN or −∞, and
        // then nothing is listed), so the solve need not scan for it.
        const float m = col_max[rho];
        dashattn::detail::FirstPass first(m, a.alpha);
        col_count[rho] = compact_list_first_pass(list_val + rho * lstride, list_id + rho * lstride, col_count[rho],
                                                 candidate_threshold(m), &first);
        tau = static_cast<float>(entmax_threshold_given_max(ArrayValues{list_val + rho * lstride}, col_count[rho], m,
                                                            a.alpha, a.solver, &first.sums).tau);
      } else {
        int ends[kWarps] = {};
        int n = 0;
#pragma unroll
        for (int s = 0; s < kWarps; ++s) {
          n += col_count[s * kWarpRows + rho];
          ends[s] = n;
        }
        const SegmentedList list{list_val, rho, kWarpRows, lstride, ends[0], ends[1], ends[2]};
        tau = static_cast<float>(entmax_threshold(list, n, a.alpha, a.solver).tau);
      }
    }
    row_tau[rho] = tau;
  }
  __syncthreads();

  phase_clock.mark(3);  // τ solved
  // ---- Emit: one warp per token (route_emit.cuh) ----
  emit_block_tokens<kWarps, kWarpRows>(a, sp, r, tok0, tokens, g, split, cmax, col_count, row_tau, list_val, list_id,
                                       lstride, reinterpret_cast<float*>(smem),
                                       static_cast<int>(size_t(stages) * S::kStageBytes / 4 / kWarps), warp, lane);
  for (int rho = tid; rho < rows_used; rho += kThreads)
    *row_tau_ptr(a, sp, r, g, tok0, rho) = tok0 + rho / g < sp.n_q ? row_tau[rho] : NAN;
  phase_clock.mark(4);  // emit
  phase_clock.finish(false);
}

}  // namespace route_detail
}  // namespace cuda
}  // namespace dashattn
