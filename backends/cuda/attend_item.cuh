// A Stage-2 CTA's row block ("item", attend_kernel.cuh): which sequence, KV head and rows it is; the work that
// prepares it (its Q copy, the union of its tokens' tiles, tau / mu); and its plan from the union's counts (which
// path, how many tiles, where the prior bias comes from), which every role of the CTA computes alike. One item per
// CTA, or with the persistent kernel (attend_persistent.cuh) each of the CTA's items in turn.
#pragma once

#include <cstdint>

#include "attend_args.cuh"
#include "attend_config.cuh"
#include "attend_masks.cuh"
#include "attend_wgmma.cuh"
#include "mma_tiles.cuh"
#include "phase_clocks.cuh"
#include "warp_scan.cuh"

namespace dashattn::cuda {

// Rows r, r + step, ... of an item as (token in the CTA, head of the group): the division by g happens once, then
// each step advances by a fixed number of tokens and heads. (The CTA's head is issue-bound: with a division per
// row the Q copy's issue took 2.2 K cycles of a chunk-draw CTA at 32K / 87.5 % on an H100, 1.1 K with this;
// perf-log.md, thirtieth pass.)
struct RowCursor {
  int token_in_cta, head;
  int g, step_tokens, step_heads;
  __device__ __forceinline__ RowCursor(int r_off, int r, int step, int group) : g(group) {
    token_in_cta = (r_off + r) / g;
    head = r_off + r - token_in_cta * g;
    step_tokens = step / g;
    step_heads = step - step_tokens * g;
  }
  __device__ __forceinline__ void advance() {
    token_in_cta += step_tokens;
    head += step_heads;
    if (head >= g) {
      head -= g;
      ++token_in_cta;
    }
  }
};

template <class Cfg>
struct AttendItem {
  using Element = typename Cfg::Element;
  int g = 1;
  int seq = 0, kv_head = 0;
  int64_t row0 = 0, rows_in_seq = 0, first_token = 0, last_token = 0;
  SequenceSpan sp;
  // Row r of the item is head (r_off + r) % g of token first_token + (r_off + r) / g (split_row), in 32-bit
  // arithmetic: with a 64-bit division and offset per 16-byte piece, the Q copy and the union were most of a CTA's
  // first 2 us.
  int r_off = 0;
  bool any_rows = false;
  int union_words = 0;
  // The one-item tilings' head (not persistent, no tile split): the producer warp's lane 0 initialises the
  // barriers, and the union is staged in the still empty ring (build_union).
  static constexpr bool kWideHead = !Cfg::kPersistent && !Cfg::kTileSplit;

  // Row block m_block of (sequence, KV head) y = seq * h_kv + kv_head.
  __device__ __forceinline__ void begin(const AttendArgs& a, int64_t m_block, int y) {
    g = a.group;
    row0 = m_block * Cfg::kRows;
    // With g and h_kv powers of two (every GQA layout in use), shifts and masks: the divisions, a 64-bit one among
    // them, were a chain of ~100 dependent instructions at the start of every warp's head (prefill Stage 2 0.3-1.2 %
    // faster with the shifts on an H200; perf-log.md, forty-sixth pass). The two forms stay apart as measured: one
    // form with selects compiles to different code.
    if (((g & (g - 1)) | (a.h_kv & (a.h_kv - 1))) == 0) {
      const int log2_g = __ffs(g) - 1;
      seq = y >> (__ffs(a.h_kv) - 1);
      kv_head = y & (a.h_kv - 1);
      sp = device_sequence_span(a.batch, seq);
      rows_in_seq = sp.n_q << log2_g;
      first_token = row0 >> log2_g;
      r_off = int(row0 & (g - 1));
      last_token = min((row0 + Cfg::kRows - 1) >> log2_g, sp.n_q - 1);
    } else {
      seq = y / a.h_kv;
      kv_head = y % a.h_kv;
      sp = device_sequence_span(a.batch, seq);
      rows_in_seq = sp.n_q * g;
      first_token = row0 / g;
      r_off = int(row0 - first_token * g);
      last_token = min((row0 + Cfg::kRows - 1) / g, sp.n_q - 1);
    }
    any_rows = row0 < rows_in_seq;
    union_words = any_rows ? int(((sp.n_k - sp.n_q + last_token) / kTileKeys) / 32 + 1) : 0;
  }
  __device__ __forceinline__ void split_row(int r, int& token_in_cta, int& head) const {
    token_in_cta = (r_off + r) / g;
    head = r_off + r - token_in_cta * g;
  }
  __device__ __forceinline__ int n_tokens() const { return any_rows ? int(last_token - first_token + 1) : 0; }

  // Q rows of the item, zero-filled past the sequence, by threads t0, t0 + nt, ... (nt a multiple of 32: whole
  // warps; committed, not waited).
  __device__ __forceinline__ void copy_q(const AttendArgs& a, Element* sQ, int t0, int nt) const {
    const Element* q_first = static_cast<const Element*>(a.q.data) +
                             a.q.offset(sp.batch_index, sp.q_begin + first_token, int64_t(kv_head) * g);
    const int rows_here = int(::min(int64_t(Cfg::kRows), rows_in_seq - row0));
    // Every thread keeps its piece and steps nt / kRowPieces rows at a time (nt is whole warps, and a row's pieces
    // divide 32), through a RowCursor (prefill Stage 2 1-2.7 % faster than a division per piece).
    static_assert(32 % Cfg::kRowPieces == 0, "a warp's lanes cover whole rows of pieces");
    const int piece = t0 % Cfg::kRowPieces;
    const int step = nt / Cfg::kRowPieces;
    int r = t0 / Cfg::kRowPieces;
    for (RowCursor rc(r_off, r, step, g); r < Cfg::kRows; r += step, rc.advance()) {
      const bool ok = r < rows_here;
      const Element* src =
          ok ? q_first + rc.token_in_cta * a.q.stride[1] + rc.head * a.q.stride[2] + piece * 8 : q_first;
      mma::cp_async_16(sQ + q_swz<Cfg::kRows>(r, piece * 8), src, ok ? 16 : 0);
    }
    mma::cp_async_commit();
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // sm_90: the item's Q rows by tensor copy into the Q buffer at sQ_addr, completing on q_bar (one arrival): one box
  // of kRows / g tokens x g heads per 64 columns (tmap_q, make_row_tensor_map), which needs g to divide kRows.
  // arrive: also this thread's arrival on q_bar (false: the caller arrives later, as the persistent helpers do).
  __device__ __forceinline__ void copy_q_tensor(const CUtensorMap& tmap_q, uint32_t sQ_addr, uint32_t q_bar,
                                                bool arrive = true) const {
    constexpr uint32_t kQBlockBytes = uint32_t(Cfg::kRows) * 128u;
    mma::mbar_expect_tx(q_bar, uint32_t(Cfg::kQBytes));
    if (arrive) mma::mbar_arrive(q_bar);
#pragma unroll
    for (int cb = 0; cb < Cfg::kHeadDim / 64; ++cb)
      // Evict-first (attend_config.cuh). The decode tiling never takes this copy: without the policy there, its
      // code stays as it was measured.
      mma::tma_load_4d<DASHATTN_ATTEND_L2_HINTS && !Cfg::kTileSplit>(sQ_addr + uint32_t(cb) * kQBlockBytes, &tmap_q,
                                                                      q_bar, cb * 64, kv_head * g,
                                                                      int(sp.q_begin + first_token),
                                                                      int(sp.batch_index));
  }
#endif

  // Whether union_tokens can take its first word per lane from early_union_word: C = 64 (a mask word is a tile
  // word), not dense.
  __device__ __forceinline__ bool early_word_applies(const AttendArgs& a) const {
    return !a.dense && a.chunk == kTileKeys;
  }
  // The first mask word that lane `lane` of warp w0 reads in union_tokens (its first token's word `lane`), loaded
  // before the Q copy is issued so that its latency overlaps the copy instead of following the first barrier (the
  // CTA's head is issue-bound; perf-log.md, thirtieth pass). 0 where it does not apply.
  __device__ __forceinline__ uint32_t early_union_word(const AttendArgs& a, int w0, int lane) const {
    if (!early_word_applies(a) || w0 >= n_tokens() || lane >= union_words || lane >= a.mask_words) return 0u;
    return mask_row_ptr(a, sp, kv_head, first_token + w0)[lane];
  }

  // Union of the tile sets of the item's tokens into words (zeroed): warp w0 of nw takes tokens w0, w0 + nw, ...
  // (their routing computed once), its lanes the words; the per-token tile counts are summed per warp before one
  // shared atomic on counts[1] (an atomic per word all hit one address).
  // early: the word early_union_word loaded for this lane (used where that applies, else ignored).
  __device__ __forceinline__ void union_tokens(const AttendArgs& a, uint32_t* words, int* counts, int w0, int nw,
                                               int lane, uint32_t early = 0u, bool have_early = false) const {
    const int n = int(last_token - first_token + 1);
    have_early = have_early && early_word_applies(a);
    for (int t = w0; t < n; t += nw) {
      const RowRouting rr = token_routing(a, sp, kv_head, first_token + t);
      int tiles = 0;
      for (int w = lane; w < union_words; w += 32) {
        const uint32_t bits = have_early && t == w0 && w == lane
                                  ? row_tile_word_c64(rr, w, early)
                                  : row_tile_word(rr, w, a.chunk, a.log2_chunk, a.mask_words, a.dense);
        if (bits) {
          atomicOr(&words[w], bits);
          tiles += __popc(bits);
        }
      }
      if constexpr (Cfg::kWgmma) {
        for (int off = 16; off > 0; off >>= 1) tiles += __shfl_xor_sync(0xffffffffu, tiles, off);
        if (lane == 0 && tiles) atomicAdd(&counts[1], tiles);
      }
    }
  }

  // The one-item kernel's union without shared atomics, where the tokens' tile words fit in `room` words of
  // staging (the K/V ring, still empty in the CTA's head): warp w0 of nw writes the words of tokens w0, w0 + nw,
  // ... into stage[token * union_words + word] (eight warps ORing into the same 17 words had serialized on them),
  // and merge_union then ORs and counts them. `early` as in union_tokens.
  __device__ __forceinline__ bool union_staged_fits(int room) const {
    return int64_t(n_tokens()) * union_words <= int64_t(room);
  }
  __device__ __forceinline__ void union_token_words(const AttendArgs& a, uint32_t* stage, int w0, int nw, int lane,
                                                    uint32_t early = 0u, bool have_early = false) const {
    const int n = n_tokens();
    have_early = have_early && early_word_applies(a);
    for (int t = w0; t < n; t += nw) {
      const RowRouting rr = token_routing(a, sp, kv_head, first_token + t);
      for (int w = lane; w < union_words; w += 32)
        stage[t * union_words + w] = have_early && t == w0 && w == lane
                                         ? row_tile_word_c64(rr, w, early)
                                         : row_tile_word(rr, w, a.chunk, a.log2_chunk, a.mask_words, a.dense);
    }
  }
  // One warp's union words, lane w holding word w (w < 32), into the list of the union's tiles in ascending order;
  // total(incl) is called first with the lane's inclusive tile count (lane 31's: the union's), for the caller to
  // publish it.
  template <class Total>
  __device__ __forceinline__ static void list_word_tiles(uint32_t bits, int w, int lane, uint16_t* list,
                                                         Total&& total) {
    const int count = __popc(bits);
    const int incl = warp_inclusive_sum(count, lane);
    total(incl);
    int at = incl - count;
    for (uint32_t b = bits; b != 0u; b &= b - 1u) list[at++] = uint16_t(w * 32 + __ffs(b) - 1);
  }
  // merge_union's warp 0 with at most kFixedMergeTokens tokens (g >= 16 in the wide tilings): lane w reads word w
  // of every token in one unrolled round of predicated loads, then counts and lists them (list_word_tiles). The
  // general loop's code is several times longer, and warp 0 runs it once per CTA, from cold instruction lines; the
  // plan's barrier waits for this warp (chunk-draw prefill Stage 2 0.9-2 % faster on an H200; perf-log.md,
  // forty-seventh pass).
  static constexpr int kFixedMergeTokens = 8;
  __device__ __forceinline__ void merge_union_fixed(const uint32_t* stage, uint32_t* words, int* counts, int lane,
                                                    uint16_t* list) const {
    const int n = n_tokens();
    const bool mine = lane < union_words;
    uint32_t bits = 0u;
    int summed = 0;
#pragma unroll
    for (int t = 0; t < kFixedMergeTokens; ++t) {
      const uint32_t b = mine && t < n ? stage[t * union_words + lane] : 0u;
      bits |= b;
      if constexpr (Cfg::kWgmma) summed += __popc(b);
    }
    if (mine) words[lane] = bits;
    list_word_tiles(bits, lane, lane, list, [&](int incl) {
      if (lane == 31) counts[0] = incl;
    });
    if constexpr (Cfg::kWgmma)
      for (int off = 16; off > 0; off >>= 1) summed += __shfl_xor_sync(0xffffffffu, summed, off);
    if (lane == 0) counts[1] = summed;
  }

  // The union of union_token_words' staged words into words, its tile count into counts[0] and (warpgroup
  // tilings) the per-token counts summed into counts[1], by whole warps (threads t0, t0 + nt, ...); with `list`
  // and at most 32 words, warp 0 alone, which also writes the list as count_union does.
  __device__ __forceinline__ void merge_union(const uint32_t* stage, uint32_t* words, int* counts, int t0, int nt,
                                              int lane, uint16_t* list = nullptr) const {
    const int n = n_tokens();
    const bool one_warp = list != nullptr && union_words <= 32;
    if (one_warp && t0 >= 32) return;
    if (one_warp && n <= kFixedMergeTokens) {
      merge_union_fixed(stage, words, counts, lane, list);
      return;
    }
    int local = 0, summed = 0;
    for (int w = one_warp ? lane : t0; w < (one_warp ? 32 : union_words); w += one_warp ? 32 : nt) {
      uint32_t bits = 0u;
      if (w < union_words) {
        for (int t = 0; t < n; ++t) {
          const uint32_t b = stage[t * union_words + w];
          bits |= b;
          if constexpr (Cfg::kWgmma) summed += __popc(b);
        }
        words[w] = bits;
      }
      const int count = __popc(bits);
      if (one_warp)
        list_word_tiles(bits, w, lane, list, [&](int incl) {
          if (lane == 31) counts[0] = incl;  // (warp 0 alone writes the counts here)
        });
      local += count;
    }
    if constexpr (Cfg::kWgmma)
      for (int off = 16; off > 0; off >>= 1) summed += __shfl_xor_sync(0xffffffffu, summed, off);
    if (one_warp) {
      if (lane == 0) counts[1] = summed;
      return;
    }
    for (int off = 16; off > 0; off >>= 1) local += __shfl_xor_sync(0xffffffffu, local, off);
    if (lane == 0) {
      if (local) atomicAdd(&counts[0], local);
      if (Cfg::kWgmma && summed) atomicAdd(&counts[1], summed);
    }
  }

  // The union's tile count into counts[0], by whole warps (threads t0, t0 + nt, ...). With `list` (room for 1024
  // tiles) and a union of at most 32 words, warp 0 alone, a lane per word, also writes the union's tiles there in
  // ascending order (union_list() says whether it did). (Every warp writing the tiles at its own bit positions
  // instead took ~1 K cycles off a per-token CTA's head, but cost chunk draws 1.5-3 % of Stage 2; perf-log.md,
  // thirty-second pass.)
  __device__ __forceinline__ void count_union(const uint32_t* words, int* counts, int t0, int nt, int lane,
                                              uint16_t* list = nullptr) const {
    if (list != nullptr && union_words <= 32) {
      if (t0 >= 32) return;
      const uint32_t bits = lane < union_words ? words[lane] : 0u;
      list_word_tiles(bits, lane, lane, list, [&](int incl) {
        if (lane == 31 && incl) atomicAdd(&counts[0], incl);
      });
      return;
    }
    int local = 0;
    for (int w = t0; w < union_words; w += nt) local += __popc(words[w]);
    for (int off = 16; off > 0; off >>= 1) local += __shfl_xor_sync(0xffffffffu, local, off);
    if (lane == 0 && local) atomicAdd(&counts[0], local);
  }

  // The one-item kernel's union step, by every thread of the CTA (it holds block barriers): the tokens' tile words
  // staged in the (still empty) ring where they fit, then merged without atomics, else ORed into the zeroed union;
  // the union's words, counts and (at most 32 words) list in words / counts / list. With Q by cp.async (no tensor
  // map) its copy is issued first and waited for at the end. early_word / early as in union_tokens; clock: the
  // profiling build's head laps 2-7 and the warps' first barrier mark.
  __device__ __forceinline__ void build_union(const AttendArgs& a, Element* sQ, uint32_t* ring, uint32_t* words,
                                              int* counts, uint16_t* list, int tid, int warp, int lane,
                                              uint32_t early_word, bool early, ItemClock& clock) const {
    const bool staged = kWideHead && union_staged_fits(int(Cfg::kRingBytes / 4));
    if (!a.q_tma) copy_q(a, sQ, tid, Cfg::kThreads);
    if (tid == 0) clock.head_lap(2);
    if (!staged) {
      for (int w = tid; w < union_words; w += Cfg::kThreads) words[w] = 0u;
      __syncthreads();  // (staged: the barrier after the words orders the initialisation too)
    }
    if (tid == 0) {
      clock.head_lap(3);
      clock.head_lap(4);
    }
    if (staged)
      union_token_words(a, ring, warp, Cfg::kThreads / 32, lane, early_word, early);
    else
      union_tokens(a, words, counts, warp, Cfg::kThreads / 32, lane, early_word, early);
    if (tid == 0) clock.head_lap(5);
    clock.warp_mark(0, lane);
    __syncthreads();
    if (tid == 0) {
      clock.head_lap(6);
      phase_mark(PhaseKernel::kAttend, 1);
    }
    if (staged)
      merge_union(ring, words, counts, tid, Cfg::kThreads, lane, list);
    else
      count_union(words, counts, tid, Cfg::kThreads, lane, list);
    // (Q by tensor copy: only the consumer warps wait for it, at their start, so that the producer's first tiles
    // and every role's plan do not wait for Q's round trip. The bias lists' copies likewise: each consumer warp
    // waits for its own just before the table.)
    if (!a.q_tma) mma::cp_async_wait<0>();
    if (tid == 0) clock.head_lap(7);
    if constexpr (Cfg::kWgmma) wgmma::fence_proxy_async();  // Q is read by the tensor cores
  }

  // The list count_union wrote (null where it wrote none).
  __device__ __forceinline__ const uint16_t* union_list(const uint16_t* list) const {
    return list != nullptr && union_words <= 32 ? list : nullptr;
  }

  // Stage 1's tau of row r's head and mu of its token (zeros past the sequence). Only the consumer-bias
  // instances call it, and their g divides 16: a power of two, so the row splits by a shift and a mask, and the
  // item's part of the offsets is one uniform base (a division by g and three 64-bit products per row took ~1 K
  // cycles of a CTA's issue-bound head; perf-log.md, thirty-first pass).
  __device__ __forceinline__ float2 tau_mu(const AttendArgs& a, int r) const {
    float2 tm = make_float2(0.0f, 0.0f);
    if (r < int(::min(int64_t(Cfg::kRows), rows_in_seq - row0))) {
      const int rr = r_off + r;
      const int token_in_cta = rr >> (__ffs(g) - 1), head = rr & (g - 1);
      const float* tau = static_cast<const float*>(a.tau.data) +
                         row_output_offset(a.tau, sp, int64_t(kv_head) * g, first_token);
      const float* mu = static_cast<const float*>(a.mu.data) + row_output_offset(a.mu, sp, kv_head, first_token);
      tm.x = tau[head * a.tau.stride[1] + token_in_cta * a.tau.stride[2]];
      tm.y = mu[token_in_cta * a.mu.stride[2]];
    }
    return tm;
  }
};

// What an item runs: its tiles (split z of a row block takes the z-th equal share of the union), the path and the
// source of the prior bias. CTA-uniform.
struct ItemPlan {
  int64_t tile_start = 0, tile_count = 0;
  int n_iter = 0, n_tokens_cta = 0, n_pairs = 0;
  bool use_warpgroups = false;  // the warpgroup (wgmma) path, else per warp on mma.sync
  bool use_table = false;       // consumer bias: the per-CTA table before the main loop
  bool kbar_per_tile = false;   // consumer bias: per tile from the stage's k̄ rows
  bool use_records = false;     // the record warp writes each stage's record (and arrives on full_bar)
  bool producer_table = false;  // the producer's per-stage bias tables (groups that span warps)
  bool stage_kbar = false;      // the table's k̄ columns staged in shared memory
  uint32_t full_bar = 0;        // the full barriers the item's tiles complete on
  TileCursor cursor{0, 0u};     // at the tile of rank tile_start
};

// The plan from the union's counts (total: tiles in the union; summed: per-token counts summed). per_tile: the
// chunks of a 64-key tile; full_bar32 / full_bar64: the full barriers without / with the record warp's arrivals.
template <class Cfg>
__device__ __forceinline__ ItemPlan plan_item(const AttendArgs& a, const AttendItem<Cfg>& item, const uint32_t* words,
                                              int split, int per_tile, int64_t total, int64_t summed,
                                              uint32_t full_bar32, uint32_t full_bar64) {
  ItemPlan p;
  p.use_warpgroups = Cfg::kWgmma;
  if (item.any_rows) {
    // Warpgroup MMA computes a tile for 4 tokens at once, so it pays only when the tokens mostly share their
    // tiles: sum of per-token counts >= 0.7 x tokens x union (1 when all share, about rho / (1 - (1 - rho)^8)
    // for independent masks keeping rho of the chunks, 0.28 at rho = 0.25). Otherwise each warp computes its
    // own tiles with mma.sync. The warpgroup path runs at about 1.36 x the per-warp rate (dense: 407 vs 300
    // TFLOP/s on an H200), so with 4 tokens per group it wins from about 3 of 4 tokens per tile.
    if constexpr (Cfg::kWgmma) p.use_warpgroups = 10 * summed >= 7 * total * (item.last_token - item.first_token + 1);
    // One split (every prefill launch) needs no division: a 64-bit one is a long call in the CTA's head.
    const int64_t per = a.num_splits == 1 ? total : (total + a.num_splits - 1) / a.num_splits;
    p.tile_start = ::min(int64_t(split) * per, total);
    p.tile_count = ::min(per, total - p.tile_start);
  }
  p.n_iter = int(p.tile_count);
  // Consumer-computed bias (the launcher picks that instance only with a prior and 16 % g == 0): the per-CTA table
  // (entry [pair p = rank in the union * per_tile + chunk of the tile][token slot]) when it fits, else per tile
  // from the stage's k̄ buffer; the producer's tables only for groups that span warps.
  const bool bias_on = !a.dense && a.prior != PriorMode::kNone;
  p.n_tokens_cta = item.n_tokens();
  p.n_pairs = p.n_iter * per_tile;
  p.use_table = Cfg::kConsumerBias && int64_t(p.n_pairs) * p.n_tokens_cta <= int64_t(a.bias_table_floats);
  p.kbar_per_tile = Cfg::kConsumerBias && !p.use_table;
  // The warpgroup path has no per-tile x = Q k̄^T (an mma.sync inside its wgmma pipeline would wait for the
  // wgmma, and its registers would crowd the pipeline's): a CTA whose table does not fit computes per warp.
  if (p.kbar_per_tile) p.use_warpgroups = false;
  // The persistent kernel's record warp writes records for every item, so that the full barriers' phases run
  // on across items whichever path an item takes.
  p.use_records = Cfg::kWgmma && (Cfg::kPersistent || p.use_warpgroups);
  p.full_bar = p.use_records ? full_bar64 : full_bar32;
  p.producer_table = bias_on && !p.use_table && !p.kbar_per_tile;
  // Wide (prefill) tilings build the table from k̄ columns staged in shared memory (the still empty ring, then
  // released to the producer through ring_free_bar; the persistent kernel's own staging area).
  p.stage_kbar = !Cfg::kTileSplit && p.use_table;
  // Every role starts its cursor at the tile of rank tile_start.
  if (p.tile_count > 0) {
    int64_t skip = p.tile_start;
    for (int w = 0; w < item.union_words; ++w) {
      const uint32_t bits = words[w];
      const int c = __popc(bits);
      if (skip < c) {
        uint32_t b = bits;
        for (int64_t s = 0; s < skip; ++s) b &= b - 1;
        p.cursor.word = w;
        p.cursor.bits = b;
        break;
      }
      skip -= c;
    }
  }
  return p;
}

}  // namespace dashattn::cuda
