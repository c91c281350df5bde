// The Stage-2 kernel's producer warp (see attend_kernel.cuh for the design): streams the union's K/V tiles into
// the ring, with the k̄ rows of the per-tile bias or the producer's bias tables where the launch asks for them.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "attend_args.cuh"
#include "attend_bias.cuh"
#include "attend_config.cuh"
#include "mma_tiles.cuh"

namespace dashattn::cuda {

// Fill pos of the ring (counted over the kernel's whole walk: the persistent kernel's items run on): its stage,
// once every consumer lane has released that stage's previous fill (the first kStages fills find it free). The
// one-item kernels' loops (attend_produce, attend_tile_records) keep this step written out: through the helper
// their SASS came out rescheduled, and they are not changed without a timing on the GPU.
template <int kStages>
__device__ __forceinline__ int wait_stage_free(uint32_t empty_bar, uint32_t pos) {
  const int stage = int(pos % kStages);
  if (pos >= uint32_t(kStages)) mma::mbar_wait(empty_bar + 8u * stage, (pos / kStages - 1) & 1u);
  return stage;
}

// Where whole tile `tile` of sequence span sp starts in the K/V view: (batch index, k_begin + 64 tile), or for a
// paged batch the tile's page and its row there. The page lookup runs in 32-bit arithmetic (a sequence's tiles
// and a page's rows fit): with 64-bit keys it inlined a 64-bit division whose registers the producer loops do not
// have (the warpgroup instances' spills doubled, and a decode step's Stage 2 lost 1-2 us).
__device__ __forceinline__ void tile_origin(const KeyPages& pages, const SequenceSpan& sp, int64_t tile, int& index,
                                            int& row) {
  if (pages.table == nullptr) {
    index = int(sp.batch_index);
    row = int(sp.k_begin + tile * kTileKeys);
    return;
  }
  const uint32_t tiles_per_page = uint32_t(pages.page_size) / uint32_t(kTileKeys);
  const uint32_t slot = uint32_t(tile) / tiles_per_page;
  index = pages.table[sp.seq * pages.stride + slot];
  row = int(uint32_t(tile) - slot * tiles_per_page) * kTileKeys;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The tensor copies of a whole K/V tile (64 key rows from `row` of axis-0 index `index` of the view: a batch
// index, or a page of a paged pool) into a stage's K and V buffers, completing as transactions on the stage's full
// barrier fb; lane 0 of the producer only. kEvictFirst: an L2 evict-first policy, for tiles read once (a decode
// step's stream).
template <class Cfg, bool kEvictFirst>
__device__ __forceinline__ void copy_whole_tile(uint32_t fb, typename Cfg::Element* sK, typename Cfg::Element* sV,
                                                const CUtensorMap& tmap_k, const CUtensorMap& tmap_v, int row,
                                                int kv_head, int index) {
  mma::mbar_expect_tx(fb, 2u * Cfg::kTileBytes);
  const uint32_t dk = mma::smem_addr(sK), dv = mma::smem_addr(sV);
#pragma unroll
  for (int cb = 0; cb < Cfg::kColBlocks; ++cb) {
    mma::tma_load_4d<kEvictFirst>(dk + cb * Cfg::kBlockBytes, &tmap_k, fb, cb * 64, row, kv_head, index);
    mma::tma_load_4d<kEvictFirst>(dv + cb * Cfg::kBlockBytes, &tmap_v, fb, cb * 64, row, kv_head, index);
  }
}
#endif

// Walks tiles of rank tile_start.. (cursor) for n_iter steps; kbar_per_tile / producer_table say which bias data
// the consumers expect with each tile. One arrival per lane and phase on the stage's full barrier. Step
// ring_free_from (if reached) first waits for ring_free_bar: its stage and the later ones held the bias table's
// staged k̄ columns. ring_pos: the ring's fills before this walk (the persistent kernel's earlier items), which
// sets the first stage and the barriers' parities.
template <class Cfg>
__device__ __forceinline__ void attend_produce(const AttendArgs& a, const SequenceSpan& sp, int seq, int kv_head,
                                               int lane, TileCursor cursor, int n_iter, int64_t first_token,
                                               int n_tokens, int per_tile, bool kbar_per_tile, bool producer_table,
                                               uint32_t full_bar, uint32_t empty_bar,
                                               typename Cfg::Element* sRing, unsigned char* sKbar, float* sBias,
                                               const uint32_t* sUnion, const CUtensorMap& tmap_k,
                                               const CUtensorMap& tmap_v, int ring_free_from,
                                               uint32_t ring_free_bar, uint32_t ring_pos = 0) {
  using Element = typename Cfg::Element;
  constexpr int D = Cfg::kHeadDim;
  constexpr int kStages = Cfg::kStages;
  // Producer: stream the K/V tiles into the ring, then the stage's bias table. Each of the 32 lanes arrives on
  // the stage's full barrier once its part is written; the copies hold the phase open until they land (as
  // transactions of the tensor copies, or through cp.async's deferred arrival).
  constexpr int kRowsPerPass = 32 / Cfg::kRowPieces > 0 ? 32 / Cfg::kRowPieces : 1;
  constexpr int kLanesPerRow = Cfg::kRowPieces < 32 ? Cfg::kRowPieces : 32;
  const int lane_row = lane / kLanesPerRow;
  const int lane_piece = lane % kLanesPerRow;
  const int64_t k_row_stride = a.k.stride[1], v_row_stride = a.v.stride[1];
  for (int it = 0; it < n_iter; ++it) {
    const uint32_t pos = ring_pos + uint32_t(it);  // fills of the ring so far (the persistent kernel's run on)
    const int stage = int(pos % kStages);
    const uint32_t fb = full_bar + 8u * stage;
    if (pos >= uint32_t(kStages)) mma::mbar_wait(empty_bar + 8u * stage, (pos / kStages - 1) & 1u);
    if (it == ring_free_from) {
      // Stages from here on held the bias table's k̄ columns: wait until every consumer lane is done with them,
      // then order those reads (generic proxy) before the copies' writes (async proxy).
      mma::mbar_wait(ring_free_bar, 0u);
      if constexpr (Cfg::kWgmma) wgmma::fence_proxy_async();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      else asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
    }
    const int64_t tile = cursor.next(sUnion);
    Element* sK = sRing + size_t(stage) * 2 * Cfg::kTileElems;
    Element* sV = sK + Cfg::kTileElems;
    bool arrived = false;
    if (kbar_per_tile) {
      // k̄ of the tile's routable chunks (the rest read as zeros and carry no bias).
      const int64_t c0 = (tile * kTileKeys) >> a.log2_chunk;
      const int64_t n_routable = routable_chunks(sp.n_k, a.log2_chunk);
      const Element* summ = static_cast<const Element*>(a.summaries.data);
      Element* dst = reinterpret_cast<Element*>(sKbar + size_t(stage) * Cfg::kKbarStageBytes);
      for (int task = lane; task < per_tile * Cfg::kRowPieces; task += 32) {
        const int qd = task / Cfg::kRowPieces, piece = task % Cfg::kRowPieces;
        const bool ok = c0 + qd < n_routable;
        const Element* src = ok ? summ + a.summaries.offset(seq, c0 + qd, kv_head) + piece * 8 : summ;
        mma::cp_async_16(dst + qd * Cfg::kKbarRowElems + piece * 8, src, ok ? 16 : 0);
      }
    }
    bool copied = false;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Whole tiles by tensor copy; the last partial tile of a sequence by cp.async, which zero-fills the rows
    // past the end (the tensor map's bounds are the tensor's, not the sequence's).
    if (a.use_tma && (tile + 1) * kTileKeys <= sp.n_k) {
      // Decode (the tile split): every K/V tile is read by exactly one CTA, once.
      if (lane == 0) {
        int index, row;
        tile_origin(a.pages, sp, tile, index, row);
        copy_whole_tile<Cfg, Cfg::kTileSplit>(fb, sK, sV, tmap_k, tmap_v, row, kv_head, index);
      }
      copied = true;
    }
#endif
    if (!copied) {
      // The tile's first rows (a paged pool's tile lies in one page: its size is a multiple of 64).
      int index, row;
      tile_origin(a.pages, sp, tile, index, row);
      const Element* ktile = static_cast<const Element*>(a.k.data) + a.k.offset(index, row, kv_head);
      const Element* vtile = static_cast<const Element*>(a.v.data) + a.v.offset(index, row, kv_head);
#pragma unroll 4
      for (int r = lane_row; r < kTileKeys; r += kRowsPerPass) {
        const bool ok = tile * kTileKeys + r < sp.n_k;
#pragma unroll
        for (int piece = lane_piece; piece < Cfg::kRowPieces; piece += kLanesPerRow) {
          const int dst = kv_swz<D>(r, piece * 8);
          mma::cp_async_16(sK + dst, ok ? ktile + r * k_row_stride + piece * 8 : ktile, ok ? 16 : 0);
          mma::cp_async_16(sV + dst, ok ? vtile + r * v_row_stride + piece * 8 : vtile, ok ? 16 : 0);
        }
      }
      if constexpr (Cfg::kWgmma) {
        // The tensor cores read the tile through the async proxy: the copies must have landed and been fenced
        // before the arrival (only the last partial tile of a sequence, or launches without tensor maps).
        mma::cp_async_commit();
        mma::cp_async_wait<0>();
        wgmma::fence_proxy_async();
      } else if (!producer_table) {
        // This lane's one arrival of the phase, once its copies have landed.
        mma::cp_async_mbar_arrive(fb);
        arrived = true;
      } else {
        // The producer's bias table follows: the lane arrives once, after both (odd groups with a prior only).
        mma::cp_async_commit();
        mma::cp_async_wait<0>();
      }
    }
    if (kbar_per_tile && copied) {
      mma::cp_async_mbar_arrive(fb);  // the k̄ copies: this lane's one arrival, once they have landed
      arrived = true;
    }
    if (producer_table)
      fill_stage_bias<Cfg>(a, sp, seq, kv_head, first_token, n_tokens, tile * kTileKeys,
                           sBias + size_t(stage) * Cfg::kRows * 4, sBias + size_t(kStages) * Cfg::kRows * 4, lane);
    // One arrival per lane and phase (a second one by the same thread is what synccheck reports).
    if (!arrived) mma::mbar_arrive(fb);
  }
  mma::cp_async_wait<0>();
}

// The persistent kernel's producer for an item whose tiles are all whole and carry no per-tile bias data (the
// common case): tensor copies only, so that the loop keeps just the ring position, the cursor and the copy
// coordinates in registers. The general walk above, at the producer warpgroup's 56 registers, reloaded ~26 spilled
// values per tile inside the persistent item loop (1 in the one-item kernel), which set the pace of per-token masks'
// tile stream there (Nsight Compute, perf-log.md, twenty-fifth pass). Arrivals as above: one per lane and phase.
template <class Cfg>
__device__ __forceinline__ void attend_produce_whole_tiles(int lane, TileCursor cursor, int n_iter, uint32_t full_bar,
                                                           uint32_t empty_bar, typename Cfg::Element* sRing,
                                                           const uint32_t* sUnion, const CUtensorMap& tmap_k,
                                                           const CUtensorMap& tmap_v, int64_t k_begin, int kv_head,
                                                           int batch_index, uint32_t ring_pos) {
  for (int it = 0; it < n_iter; ++it) {
    const int stage = wait_stage_free<Cfg::kStages>(empty_bar, ring_pos + uint32_t(it));
    const uint32_t fb = full_bar + 8u * stage;
    const int64_t tile = cursor.next(sUnion);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // (use_tma is false elsewhere, so no launch gets here)
    if (lane == 0) {
      typename Cfg::Element* sK = sRing + size_t(stage) * 2 * Cfg::kTileElems;
      copy_whole_tile<Cfg, false>(fb, sK, sK + Cfg::kTileElems, tmap_k, tmap_v, int(k_begin + tile * kTileKeys),
                                  kv_head, batch_index);
    }
#endif
    mma::mbar_arrive(fb);
  }
}

// ---- The record warp (warpgroup tilings) ----
// The stage records for the warpgroup consumers (AttendConfig::kMetaBytes): the tile, each token's attended keys and
// a bit per warpgroup (rows 64 w .. 64 w + 63 of the CTA) that has a row attending some key of it. They are written
// by a warp of the producer warpgroup that would otherwise idle, which walks the union like the producer and
// arrives on each stage's full barrier too (64 arrivals per phase), so the consumers neither walk the union, nor
// read mask words, nor vote per tile. Lane l owns token slot l: its keys are computed before the warp waits for the
// stage to be free, from a mask word cached across tiles (tiles ascend, so a word is read once per 32 chunks).
// Slots past 32 (groups of fewer than 4 heads) are computed after the wait, without the cache.
template <class Cfg>
__device__ __forceinline__ uint32_t token_warpgroups(int64_t token, int64_t row0, int g) {
  uint32_t bits = 0u;
#pragma unroll
  for (int wg = 0; wg < Cfg::kWarps / 4; ++wg) {
    // A token of a group wider than 64 rows, or cut by the boundary, counts for both warpgroups.
    const int64_t lo = (row0 + 64 * wg) / g, hi = (row0 + 64 * wg + 63) / g;
    if (token >= lo && token <= hi) bits |= 1u << wg;
  }
  return bits;
}

// Run only by CTAs (or persistent items) on the warpgroup path, whose full barriers count these arrivals; the
// persistent kernel's per-warp items arrive through attend_stage_arrivals instead.
template <class Cfg>
__device__ __forceinline__ void attend_tile_records(const AttendArgs& a, const SequenceSpan& sp, int kv_head, int lane,
                                                    TileCursor cursor, int n_iter, int64_t row0, int64_t first_token,
                                                    int n_tokens, uint32_t full_bar, uint32_t empty_bar,
                                                    unsigned char* sMeta, const uint32_t* sUnion,
                                                    uint32_t ring_pos = 0) {
  constexpr int kStages = Cfg::kStages;
  const bool own_slot = lane < n_tokens;
  RowRouting own{nullptr, -1, 0};
  MaskWordCache own_words;
  uint32_t own_wg = 0u;
  if (own_slot) {
    own = token_routing(a, sp, kv_head, first_token + lane);
    own_wg = token_warpgroups<Cfg>(first_token + lane, row0, a.group);
  }
  // Tiles since each consumer warpgroup last had one to attend (warp-uniform). A warpgroup holds the stage of the
  // last tile it attends while it waits for the next, and the tile kStages after it needs that stage refilled: had
  // it none to attend among the kStages - 1 tiles after one, it would wait there for its own release. So the
  // (kStages - 1)-th tile in a row that a warpgroup would skip is marked for it all the same. Its tokens' keys in
  // that tile are 0, so every logit of its rows is -inf and the tile changes nothing (P = 0, the row maxima stay):
  // outputs are bitwise those of a walk without the mark, at the price of one tile's MMAs per such gap. Such gaps
  // arise with per-token masks that still share most of their tiles (a chunked prefill's: the kernel hung there).
  constexpr int kGroups = Cfg::kWarps / 4;
  int skipped[kGroups];
#pragma unroll
  for (int w = 0; w < kGroups; ++w) skipped[w] = 0;
  // One walk, instantiated twice: blocks of at most 32 tokens (g >= 4 at 128 rows: the benchmark's and most models'
  // groups), where every token has a lane, without the wider blocks' token slots. With the slots' routing state and
  // inlined token_routing in the same loop, the walk spilled ~11 values per tile at the producer warpgroup's 56
  // registers; the record warp shares its scheduler with one warp of each consumer warpgroup (perf-log.md,
  // twenty-sixth pass).
  auto walk = [&](auto wide) {
    for (int it = 0; it < n_iter; ++it) {
      const uint32_t pos = ring_pos + uint32_t(it);
      const int stage = int(pos % kStages);
      const int64_t tile = cursor.next(sUnion);
      const uint64_t own_keys = own_slot ? row_tile_keys(own, own_words, tile, a.chunk, a.log2_chunk, a.dense) : 0ull;
      if (pos >= uint32_t(kStages)) mma::mbar_wait(empty_bar + 8u * stage, (pos / kStages - 1) & 1u);
      unsigned char* meta = sMeta + size_t(stage) * Cfg::kMetaStageBytes;
      uint64_t* keys = reinterpret_cast<uint64_t*>(meta + 16);
      uint32_t need = own_keys != 0ull ? own_wg : 0u;
      if (own_slot) keys[lane] = own_keys;
      if constexpr (decltype(wide)::value) {
        for (int slot = lane + 32; slot < n_tokens; slot += 32) {
          const int64_t token = first_token + slot;
          const RowRouting rr = token_routing(a, sp, kv_head, token);
          MaskWordCache words;
          const uint64_t k = row_tile_keys(rr, words, tile, a.chunk, a.log2_chunk, a.dense);
          keys[slot] = k;
          if (k != 0ull) need |= token_warpgroups<Cfg>(token, row0, a.group);
        }
      }
      need = __reduce_or_sync(0xffffffffu, need);
#pragma unroll
      for (int w = 0; w < kGroups; ++w) {
        if (need & (1u << w)) {
          skipped[w] = 0;
        } else if (++skipped[w] == kStages - 1) {
          need |= 1u << w;
          skipped[w] = 0;
        }
      }
      if (lane == 0) {
        *reinterpret_cast<int64_t*>(meta) = tile;
        *reinterpret_cast<uint32_t*>(meta + 8) = need;
      }
      mma::mbar_arrive(full_bar + 8u * stage);  // releases this lane's writes to the consumers
    }
  };
  if (n_tokens <= 32)
    walk(std::false_type{});
  else
    walk(std::true_type{});
}

// The persistent kernel's record warp on an item of the per-warp path, which reads no records: only the arrivals
// that keep the full barriers' phases (64 per phase), each after its stage was released. Without the union walk and
// the routing state of attend_tile_records, nothing is spilled per tile (that walk reloaded ~10 spilled values per
// tile in the persistent item loop and held each stage's fill open until then; perf-log.md, twenty-fifth pass).
template <class Cfg>
__device__ __forceinline__ void attend_stage_arrivals(int n_iter, uint32_t full_bar, uint32_t empty_bar,
                                                      uint32_t ring_pos) {
  for (int it = 0; it < n_iter; ++it)
    mma::mbar_arrive(full_bar + 8u * wait_stage_free<Cfg::kStages>(empty_bar, ring_pos + uint32_t(it)));
}

}  // namespace dashattn::cuda
