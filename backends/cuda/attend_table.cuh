// Stage 2's per-CTA prior-bias table (see attend_kernel.cuh): before the main loop, the consumer warps compute the
// bias of every (union tile, chunk) pair of their tokens, 8 pairs per m16n8k16 n-tile. Lane column n = lane / 4
// takes its pair's k̄ as B fragments, x = Q k̄^T, the heads' entmax weights are summed over the token's rows, and
// the first row of each token writes the entry [pair][token slot]; each warp later reads only its own tokens'
// entries (with the tile split, every warp's).
//
// Wide (prefill) tilings stage the k̄ columns in the still empty K/V ring, all loads in flight at once (272-byte
// rows, so an n-tile's 8 columns fall in distinct banks; in rounds of what the ring holds), and hand the ring to
// the producer through an mbarrier once the table is built. Gathered straight into registers one n-tile ahead,
// each n-tile waited for its loads behind the other CTAs' tile streams: the fill took 45 of a 64K CTA's 250 us
// (chunk masks at 75 %, 142 of 556 with per-token masks) with the tensor cores idle. The decode tiling keeps the
// gathered form while the producer fills the ring: its stream is the bottleneck, and delaying it costs more
// (perf-log.md).
#pragma once

#include <cstdint>

#include "attend_args.cuh"
#include "attend_bias.cuh"
#include "attend_config.cuh"
#include "mma_tiles.cuh"
#include "warp_scan.cuh"
#include "phase_clocks.cuh"

namespace dashattn::cuda {

// What the fill reads of the kernel's state: the CTA's sequence and rows, its union of tiles, its shared memory.
struct TableFill {
  const AttendArgs& a;
  const SequenceSpan& sp;
  int seq, kv_head, warp, lane, g;
  const RowInfo& row_a;
  const RowInfo& row_b;
  int n_pairs, n_tokens_cta, per_tile;
  TileCursor cursor;
  const uint32_t* sUnion;
  int union_words;
  const uint16_t* union_list;  // the union's tiles in order (AttendItem::count_union), or null
  int list_start;              // the rank of the item's first tile in it
  unsigned char* sRing;
  float* sTable;
  bool stage_kbar;         // stage the k̄ columns in shared memory (the wide tilings)
  uint32_t ring_free_bar;  // where the consumer lanes release the ring to the producer (0: staged elsewhere)
  // The persistent kernel stages in its own area (kPrepStagedCols columns), where the helper warps have already
  // copied the first round; null: the ring's last stages, every round copied here.
  unsigned char* staging = nullptr;
  // Stage 1's bias lists (CTA-uniform lists_try: this CTA staged them, one token per consumer warp): the warp's
  // token's entries and count (kNoList: none) in shared memory (not copied for a padding token).
  bool lists_try = false;
  const int2* list_stage = nullptr;
  const int* list_count = nullptr;
  const int2* list_row = nullptr;  // the token's whole list in device memory (entries past the staged ones)
};

// A consumer warp's copy of its token's bias list (bias_lists.cuh): entries and count in the bias area after the
// rows' parked τ / μ and per-tile biases, which the table path leaves unused (AttendConfig::kListStageOffset).
template <class Cfg>
struct TokenListStage {
  int2* entries;
  int* count;
  __device__ __forceinline__ TokenListStage(float* sBias, int warp)
      : entries(reinterpret_cast<int2*>(reinterpret_cast<unsigned char*>(sBias) + Cfg::kListStageOffset) +
                warp * kBiasListStaged),
        count(reinterpret_cast<int*>(reinterpret_cast<unsigned char*>(sBias) + Cfg::kListCountOffset) + warp) {}
  // Whether a CTA takes the lists (CTA-uniform): an instance that stages them, g = 16 (a warp's rows are one token)
  // and C <= 64 (whole chunks per 64-key tile).
  static __device__ __forceinline__ bool applies(const AttendArgs& a, int g) {
    return Cfg::kListsStaged && g == 16 && a.log2_chunk <= 6;
  }
  // The token's list in device memory.
  static __device__ __forceinline__ const int2* row(const AttendArgs& a, const SequenceSpan& sp, int kv_head,
                                                   int64_t token) {
    return a.lists.row(row_output_offset(a.mu, sp, kv_head, token));
  }
  // The first kBiasListStaged entries and the count of `token` by cp.async (committed, not waited), so that no
  // register holds them over the CTA's head: a lane copies two entries, lane 0 the count. The table reads any
  // entries past them from device memory (a token with that many routed chunks has as many tiles to attend).
  __device__ __forceinline__ void copy(const AttendArgs& a, const SequenceSpan& sp, int kv_head, int64_t token,
                                       int lane) const {
    static_assert(kBiasListStaged == 64, "a lane copies two entries");
    const int64_t r = row_output_offset(a.mu, sp, kv_head, token);
    mma::cp_async_16(entries + 2 * lane, a.lists.row(r) + 2 * lane, 16);
    if (lane == 0) mma::cp_async_4(count, a.lists.counts + r);
    mma::cp_async_commit();
  }
};

// Whether pred holds in every consumer thread (a reduction on the consumers' named barrier 3, which every consumer
// thread reaches).
template <class Cfg>
__device__ __forceinline__ bool consumers_all(bool pred) {
  uint32_t all;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 q, %1, 0;\n bar.red.and.pred p, 3, %2, q;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(all)
      : "r"(uint32_t(pred)), "n"(Cfg::kWarps * 32)
      : "memory");
  return all != 0u;
}

// The table from Stage 1's lists (bias_lists.cuh) instead of x = Q k̄^T: the warp's token (g = 16) zeroes its
// column, then each listed chunk's entry goes to its pair, the rank of its tile in the union times the chunks per
// tile plus its chunk of the tile. The rank is the union's tiles in the words before the tile's (the words' counts
// scanned over the warp, 32 words a round, each lane's entries taking their word's base from the round that holds
// it) plus those below it in its own word. The entries are the bias of log w as Stage 1 computed it for the mask
// bit and μ.
__device__ __forceinline__ void fill_table_from_list(const AttendArgs& a, const uint32_t* sUnion, int union_words,
                                                     int64_t tile_start, int n_pairs, int n_tokens_cta, int slot,
                                                     bool valid, const int2* entries, const int2* list_row,
                                                     int count, float mu, float* sTable, int lane) {
  // A padding token has no column (its slot may pass the CTA's tokens, into another warp's entries).
  if (!valid) return;  // warp-uniform: the warp's rows are one token
  for (int p = lane; p < n_pairs; p += 32) sTable[p * n_tokens_cta + slot] = 0.0f;
  static_assert(kTileKeys == 64, "tiles of 64 keys");
  const int log2_per_tile = 6 - a.log2_chunk;  // C <= 64
  const int per_tile = 1 << log2_per_tile;
  // The table pair of a listed chunk whose tile lies in union word `word`, after the `base` union tiles of the words
  // before it (one of the CTA's pairs if in [0, n_pairs)), and an entry's bias stored at its pair.
  auto pair_of = [&](int chunk, int word, int base) {
    const int rank = base + __popc(sUnion[word] & ((1u << ((chunk >> log2_per_tile) & 31)) - 1u));
    return int(rank - tile_start) * per_tile + (chunk & (per_tile - 1));
  };
  auto put = [&](int p, int log_w_bits) {
    sTable[p * n_tokens_cta + slot] = prior_bias_log2(a, __int_as_float(log_w_bits), mu);
  };
  if (union_words <= 32 && count <= kBiasListStaged) {  // warp-uniform: one scan, staged entries only
    const uint32_t my_word = lane < union_words ? sUnion[lane] : 0u;
    const int word_base = warp_inclusive_sum(__popc(my_word), lane) - __popc(my_word);
    __syncwarp();  // the column's zeros before the entries
    for (int k0 = 0; k0 < count; k0 += 32) {
      const int k = k0 + lane;
      const int2 e = k < count ? entries[k] : make_int2(0, 0);
      const int word = ((e.x >> log2_per_tile) >> 5) & 31;
      const int p = pair_of(e.x, word, __shfl_sync(0xffffffffu, word_base, word));
      if (k < count && p >= 0 && p < n_pairs) put(p, e.y);
    }
    return;
  }
  constexpr int kRounds = kBiasListCap / 32;  // entries per lane
  // Entry k: staged in shared memory, or past the staged ones in device memory (their loads in flight over the scan).
  auto entry = [&](int j, int k) { return 32 * j < kBiasListStaged ? entries[k] : list_row[k]; };
  int chunk[kRounds], word[kRounds], base[kRounds];
#pragma unroll
  for (int j = 0; j < kRounds; ++j) {
    const int k = 32 * j + lane;
    chunk[j] = k < count ? entry(j, k).x : 0;
    word[j] = (chunk[j] >> log2_per_tile) >> 5;
    base[j] = 0;
  }
  int carry = 0;  // the union's tiles in the rounds' words so far
  for (int w0 = 0; w0 < union_words; w0 += 32) {
    const int pc = w0 + lane < union_words ? __popc(sUnion[w0 + lane]) : 0;
    const int incl = warp_inclusive_sum(pc, lane);
    const int before = carry + incl - pc;
#pragma unroll
    for (int j = 0; j < kRounds; ++j) {
      if (32 * j >= count) break;  // warp-uniform
      const int from = __shfl_sync(0xffffffffu, before, word[j] & 31);
      if ((word[j] >> 5) == (w0 >> 5)) base[j] = from;
    }
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
  __syncwarp();  // the column's zeros before the entries
#pragma unroll
  for (int j = 0; j < kRounds; ++j) {
    const int k = 32 * j + lane;
    if (k >= count || word[j] >= union_words) continue;
    const int p = pair_of(chunk[j], word[j], base[j]);
    if (p >= 0 && p < n_pairs) put(p, entry(j, k).y);
  }
}

// The (tile, chunk) pairs of a union in order, 8 per n-tile: column(p0) gives lane column lane / 4 of the n-tile
// of pairs p0 .. p0 + 7 its chunk (-1 past the pairs). Calls come with ascending p0 (multiples of 8). The warp finds
// the tiles of the n-tile's ranks together: a window of 32 union words, a lane per word, their counts scanned over
// the warp, and each lane's word found by a binary search over the scan (five shuffles). The window stays where
// the last call ended. (A lane walking the words from a cursor, one dependent load per word, took ~1.1 us per
// n-tile of a 64K CTA at 93.75 %, whose tiles are about one per word; perf-log.md, seventeenth pass.) Where the
// kernel has the union as a list of tiles, a lane reads its tile from there instead.
struct PairColumns {
  const uint32_t* sUnion;
  TileCursor start;  // the item's first tile (rank 0): its word, with the bits before it cleared
  int union_words, n_pairs, per_tile, log2_chunk;
  const uint16_t* list;  // the union's tiles from the item's first (null: scan the words)
  int w0;    // first word of the window
  int base;  // tiles of the item before the window
  __device__ __forceinline__ PairColumns(TileCursor cursor, const uint32_t* words, int words_in_union, int pairs,
                                         int tile_chunks, int log2_c, const uint16_t* union_list = nullptr,
                                         int list_start = 0)
      : sUnion(words), start(cursor), union_words(words_in_union), n_pairs(pairs), per_tile(tile_chunks),
        log2_chunk(log2_c), list(union_list != nullptr ? union_list + list_start : nullptr), w0(cursor.word),
        base(0) {}
  __device__ __forceinline__ int64_t column(int p0, int lane) {
    if (p0 >= n_pairs) return -1;  // warp-uniform
    // per_tile is 1, 2 or 4 and divides 8, so an n-tile's 8 pairs start on a tile.
    const int log2_per_tile = per_tile == 1 ? 0 : (per_tile == 2 ? 1 : 2);
    const int p = p0 + lane / 4;
    if (list != nullptr) {
      if (p >= n_pairs) return -1;
      return ((int64_t(list[p >> log2_per_tile]) * kTileKeys) >> log2_chunk) + (p & (per_tile - 1));
    }
    const int k = p < n_pairs ? (p >> log2_per_tile) : -1;       // this lane's tile rank
    const int k_last = ::min(p0 + 7, n_pairs - 1) >> log2_per_tile;  // the n-tile's last rank (warp-uniform)
    int64_t my_c = -1;
    while (w0 < union_words) {
      const int w = w0 + lane;
      const uint32_t bits = w == start.word ? start.bits : (w < union_words ? sUnion[w] : 0u);
      const int count = __popc(bits);
      const int incl = warp_inclusive_sum(count, lane);
      const int total = __shfl_sync(0xffffffffu, incl, 31);
      // The first lane whose inclusive count passes this lane's rank within the window.
      const int kk = k - base;
      int word_lane = 0;
#pragma unroll
      for (int step = 16; step > 0; step >>= 1) {
        if (__shfl_sync(0xffffffffu, incl, word_lane + step - 1) <= kk) word_lane += step;
      }
      word_lane &= 31;
      const uint32_t wb = __shfl_sync(0xffffffffu, bits, word_lane);
      const int before = __shfl_sync(0xffffffffu, incl, word_lane) - __popc(wb);
      if (k >= base && kk < total) {
        const int bit = int(__fns(wb, 0u, kk - before + 1));
        my_c = (((int64_t(w0 + word_lane) * 32 + bit) * kTileKeys) >> log2_chunk) + (p & (per_tile - 1));
      }
      if (k_last < base + total) break;  // the window holds the n-tile's last tile: the next call starts here
      base += total;
      w0 += 32;
    }
    return my_c;
  }
};

// Copies the k̄ columns of pairs base .. base + round_pairs - 1 (n-tiles first, first + step, ... from base; a
// lane a quarter column) into staging (272-byte rows, column p - base), with cp.async (committed, not waited).
template <class Cfg>
__device__ __forceinline__ void copy_kbar_columns(const AttendArgs& a, const SequenceSpan& sp, int seq, int kv_head,
                                                  PairColumns& cols, int base, int round_pairs, int first, int step,
                                                  int lane, unsigned char* staging) {
  using Element = typename Cfg::Element;
  constexpr int D = Cfg::kHeadDim;
  constexpr int kColBytes = Cfg::kKbarColBytes;
  const Element* summ = static_cast<const Element*>(a.summaries.data);
  const int64_t n_routable = routable_chunks(sp.n_k, a.log2_chunk);
  const int t4 = lane % 4;
  for (int p0 = base + first; p0 < base + round_pairs; p0 += step) {
    const int64_t my_c = cols.column(p0, lane);
    const bool ok = my_c >= 0 && my_c < n_routable;
    const Element* src = summ + (ok ? a.summaries.offset(seq, my_c, kv_head) : 0);
    unsigned char* dst = staging + size_t(p0 - base + lane / 4) * kColBytes;
#pragma unroll
    for (int i = 0; i < D / 32; ++i)  // 16-byte pieces t4, t4 + 4, ... of the column
      mma::cp_async_16(dst + (t4 + 4 * i) * 16, src + (t4 + 4 * i) * 8, ok ? 16 : 0);
  }
  mma::cp_async_commit();
}

// q_fragment(kk, qa): the A fragment of k-step kk of the warp's Q rows; bias: the thread's two rows' bias from x
// (attend_bias.cuh); consumers_sync(): the consumer warps' barrier.
template <class Cfg, class QFragment, class ConsumersSync>
__device__ __forceinline__ void fill_bias_table(const TableFill& f, QFragment&& q_fragment,
                                                const ConsumerRowBias<Cfg::kHeadDim>& bias,
                                                ConsumersSync&& consumers_sync) {
  using Element = typename Cfg::Element;
  constexpr int kColBytes = Cfg::kKbarColBytes;
  constexpr size_t kStageBytes = 2 * size_t(Cfg::kTileBytes);
  const AttendArgs& a = f.a;
  const SequenceSpan& sp = f.sp;
  const int seq = f.seq, kv_head = f.kv_head, warp = f.warp, lane = f.lane, g = f.g;
  const int tid = warp * 32 + lane, t4 = lane % 4;
  const RowInfo& row_a = f.row_a;
  const RowInfo& row_b = f.row_b;
  const int n_pairs = f.n_pairs, n_tokens_cta = f.n_tokens_cta, per_tile = f.per_tile;
  const uint32_t* sUnion = f.sUnion;
  float* sTable = f.sTable;
  const bool stage_kbar = f.stage_kbar;
  const uint32_t ring_free_bar = f.ring_free_bar;
  // The columns go to the ring's last stages (all of them when the table needs rounds): the producer meanwhile
  // fills the first ones, so that the first tiles wait in the ring when the table is done. The persistent kernel
  // has a staging area of its own, whose first round the helper warps have filled.
  const bool prestaged = f.staging != nullptr;
  const int staging_stages = Cfg::kbar_staging_stages(n_pairs);
  unsigned char* sRing = prestaged ? f.staging : f.sRing + size_t(Cfg::kStages - staging_stages) * kStageBytes;
  const int kStagedCols = prestaged ? Cfg::kPrepStagedCols : Cfg::kbar_staged_cols(staging_stages);
  const Element* summ = static_cast<const Element*>(a.summaries.data);
  const int64_t n_routable = routable_chunks(sp.n_k, a.log2_chunk);
  const bool writer = (lane / 4) % g == 0;  // the first row of its token (g divides 8, or row 0 with g = 16)
  PairColumns cols(f.cursor, sUnion, f.union_words, n_pairs, per_tile, a.log2_chunk, f.union_list, f.list_start);
  auto load_column = [&](int64_t my_c, uint32_t (&kbf)[Cfg::kKSteps][2]) {
    const bool ok = my_c >= 0 && my_c < n_routable;
    const uint32_t* kp =
        reinterpret_cast<const uint32_t*>(summ + (ok ? a.summaries.offset(seq, my_c, kv_head) : 0)) + t4;
#pragma unroll
    for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
      kbf[kk][0] = ok ? __ldg(kp + kk * 8) : 0u;
      kbf[kk][1] = ok ? __ldg(kp + kk * 8 + 4) : 0u;
    }
  };
  // The next n-tile's k̄ loads are issued before this one's MMAs and group sums, so their L2 latency overlaps.
  // With the tile split the warps share their rows, so they take the n-tiles in turn instead (every warp still
  // walks the cursor through all of them).
  const int step = Cfg::kTileSplit ? 8 * Cfg::kWarps : 8;
  const int first = Cfg::kTileSplit ? 8 * warp : 0;
  // x = Q k̄^T of the n-tiles u = 0 .. N - 1 of xs[N][4] (pairs p0 + 8 u .. p0 + 8 u + 7) for this thread's two rows,
  // with the B fragment of n-tile u at k-step kk from b_frag(u, kk, b0, b1), k-step by k-step: one Q fragment per
  // k-step serves all n-tiles, whose MMA chains are then in flight together (one n-tile at a time, the fill was
  // latency-bound: ~1000 cycles per n-tile; perf-log.md, eighth pass). p0 only decides the profiling build's mark.
  // Only n-tiles u < n_live are computed (warp-uniform; the others stay 0).
  auto table_x = [&](int p0, auto& xs, auto&& b_frag, int n_live = 1 << 30) {
    constexpr int kN = int(sizeof(xs) / sizeof(xs[0]));
#pragma unroll
    for (int u = 0; u < kN; ++u) xs[u][0] = xs[u][1] = xs[u][2] = xs[u][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
      uint32_t qa[4];
      q_fragment(kk, qa);
#pragma unroll
      for (int u = 0; u < kN; ++u) {
        if (u < n_live) {
          uint32_t b0, b1;
          b_frag(u, kk, b0, b1);
          mma::mma_16816<Element>(xs[u], qa, b0, b1);
        }
      }
    }
    if (tid == 0 && p0 == first) phase_mark_ready(PhaseKernel::kAttend, 4, xs[0][0]);
  };
  // The table entries of pairs p0 .. p0 + 7: the group sums, and the first row of each token writes.
  auto write_entries = [&](int p0, auto&& b_frag) {
    float xs[1][4];
    table_x(p0, xs, [&](int, int kk, uint32_t& b0, uint32_t& b1) { b_frag(kk, b0, b1); });
    const float (&x)[4] = xs[0];
    float ba0, ba1, bb0, bb1;
    bias.group_bias(x, ba0, ba1, bb0, bb1);
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int p = p0 + 2 * t4 + e;
      if (p < n_pairs && writer) {
        if (row_a.valid) sTable[p * n_tokens_cta + row_a.token_slot] = e ? ba1 : ba0;
        if (g < 16 && row_b.valid) sTable[p * n_tokens_cta + row_b.token_slot] = e ? bb1 : bb0;
      }
    }
  };
  if (Cfg::kListsStaged && stage_kbar && f.lists_try) {
    // Stage 1's lists when every token of the CTA has one: no k̄ columns, and the ring goes to the producer at once.
    const int count = row_a.valid ? *f.list_count : 0;  // (g = 16: the warp's rows are one token)
    if (consumers_all<Cfg>(count >= 0 && count <= kBiasListCap)) {
      fill_table_from_list(a, sUnion, f.union_words, f.list_start, n_pairs, n_tokens_cta, row_a.token_slot,
                           row_a.valid, f.list_stage, f.list_row, count, bias.row_tau_mu[0].y, sTable, lane);
      if (ring_free_bar != 0u) mma::mbar_arrive(ring_free_bar);
      __syncwarp();
      return;
    }
  }
  if (stage_kbar) {
    // Rounds of up to kStagedCols columns: warp w copies n-tiles w, w + kWarps, ... of the round; then every
    // warp builds its own rows' entries for all of them from shared memory.
    const uint32_t* staged = reinterpret_cast<const uint32_t*>(sRing);
    TableClock clock;  // profiling build only (phase_clocks.cuh)
    if (tid == 0) clock.start();
    for (int base = 0; base < n_pairs; base += kStagedCols) {
      const int round_pairs = ::min(kStagedCols, n_pairs - base);
      if (base > 0) {  // every warp is done with the previous round's columns (reconverged after the writes)
        __syncwarp();
        consumers_sync();
      }
      if (base > 0 || !prestaged) {
        copy_kbar_columns<Cfg>(a, sp, seq, kv_head, cols, base, round_pairs, 8 * warp, 8 * Cfg::kWarps, lane, sRing);
        if (tid == 0) clock.lap(0);
        mma::cp_async_wait<0>();
        __syncwarp();
        consumers_sync();  // every warp's columns are in
        if (tid == 0) clock.lap(1);
      }
      if (g == 16) {
        // A warp's 16 rows are one token: four n-tiles' 32 group sums end in one lane each (a reduce-scatter), so
        // that one logarithm per lane makes 32 entries instead of 8 (the logarithms were most of the fill's
        // instructions; perf-log.md).
        constexpr int kBatch = 4;
        for (int p0 = base; p0 < base + round_pairs; p0 += 8 * kBatch) {
          // The round's last batch computes only its n-tiles (the lanes past the round write nothing).
          const int n_live = ::min(kBatch, (base + round_pairs - p0 + 7) / 8);
          const uint32_t* col[kBatch];
#pragma unroll
          for (int u = 0; u < kBatch; ++u) col[u] = staged + size_t(p0 + 8 * u - base + lane / 4) * (kColBytes / 4) + t4;
          float xs[kBatch][4];
          table_x(p0, xs, [&](int u, int kk, uint32_t& b0, uint32_t& b1) {
            b0 = col[u][kk * 8];
            b1 = col[u][kk * 8 + 4];
          }, n_live);
          // Lane L holds the sum of pair p0 + 8 (k / 2) + 2 t4 + k % 2, k = L / 4 % 8 (n-tile k / 2, its column
          // 2 t4 + k % 2).
          const float b = bias.row_a_bias(bias.group_sums16_scattered(xs));
          const int k = (lane / 4) % 8;
          const int p = p0 + 8 * (k / 2) + 2 * t4 + k % 2;
          if (p < base + round_pairs && row_a.valid) sTable[p * n_tokens_cta + row_a.token_slot] = b;
        }
      } else {
        for (int p0 = base; p0 < base + round_pairs; p0 += 8) {
          const uint32_t* col = staged + size_t(p0 - base + lane / 4) * (kColBytes / 4) + t4;
          write_entries(p0, [&](int kk, uint32_t& b0, uint32_t& b1) {
            b0 = col[kk * 8];
            b1 = col[kk * 8 + 4];
          });
        }
      }
      if (tid == 0) clock.lap(2);
    }
    // The ring goes to the producer: each lane's arrival releases its own reads of the staged columns (an
    // mbarrier, as for the ring's stages; a named barrier between the two roles was not racecheck-clean). Each
    // warp reads only its own rows' entries of the table.
    if (ring_free_bar != 0u) mma::mbar_arrive(ring_free_bar);
  } else {
    uint32_t kbf[Cfg::kKSteps][2], kbf_next[Cfg::kKSteps][2] = {};
    if (first < n_pairs) load_column(cols.column(first, lane), kbf);
    for (int p0 = first; p0 < n_pairs; p0 += step) {
      if (p0 + step < n_pairs) load_column(cols.column(p0 + step, lane), kbf_next);
      write_entries(p0, [&](int kk, uint32_t& b0, uint32_t& b1) {
        b0 = kbf[kk][0];
        b1 = kbf[kk][1];
      });
#pragma unroll
      for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
        kbf[kk][0] = kbf_next[kk][0];
        kbf[kk][1] = kbf_next[kk][1];
      }
    }
  }
  __syncwarp();
  if constexpr (Cfg::kTileSplit) consumers_sync();  // each warp reads entries the others wrote
}

}  // namespace dashattn::cuda
