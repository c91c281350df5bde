// Stage-2 kernel configuration and shared-memory layouts (see attend_kernel.cuh for the design).
#pragma once

#include <cstdint>

#include "attend_args.cuh"
#include "attend_masks.cuh"
#include "attend_wgmma.cuh"

// The wide tilings' tensor copies of Q and stores of o on sm_90 with an L2 evict-first policy: each row is touched
// once, and the policy keeps the K / V tiles, which many CTAs read again, in the L2 (at 32K / 87.5 % it took the
// Stage-2 kernel's DRAM reads from 353 to 320 MB, and per-token draws 0.5 % off; perf-log.md, thirty-fourth pass).
// Build with -DDASHATTN_ATTEND_L2_HINTS=0 for the default policy.
#ifndef DASHATTN_ATTEND_L2_HINTS
#define DASHATTN_ATTEND_L2_HINTS 1
#endif

namespace dashattn::cuda {

template <int kHeadDim_, typename Element_, int kWarps_, int kStages_, bool kWgmma_ = false,
          bool kConsumerBias_ = false, bool kTileSplit_ = false, bool kPersistent_ = false, bool kBiasLists_ = false>
struct AttendConfig {
  static constexpr int kHeadDim = kHeadDim_;
  using Element = Element_;
  static constexpr int kWarps = kWarps_;             // consumer warps
  // Warpgroup MMA (sm_90a): consumer warps in groups of 4 share each S = Q K^T and O += P V (64 rows, d = 128).
  // Compiled for a target without wgmma, the same configuration runs the per-warp mma.sync path.
  static constexpr bool kWgmma = kWgmma_ && wgmma::kAvailable;
  static_assert(!kWgmma_ || (kWarps_ % 4 == 0 && kHeadDim_ == 128), "wgmma tiling: warpgroups of 64 rows, d = 128");
  // The producer: one warp, or with wgmma a whole warpgroup (one working warp) so that setmaxnreg can move
  // registers from it to the consumers. 12 warps cap every thread at 168 registers at launch (3 warps per SM
  // sub-partition); then the producer warpgroup drops to kProducerRegs and the consumers rise to kConsumerRegs
  // (4 x P + 8 x C = 12 x 168). Per instance: below ~100 the plain instance's producer spills in its copy loop;
  // the bias instance's per-warp (mma.sync) path needs 224 for its table reads (at 200 it spills and runs ~19 %
  // slower on per-token masks). Counted from the template flag, not kWgmma, so that the host and every device pass
  // agree on the block size (an sm_80 pass idles 3 warps).
  static constexpr int kProducerWarps = kWgmma_ ? 4 : 1;
  static constexpr int kProducerRegs = kConsumerBias_ ? 56 : 104;
  static constexpr int kConsumerRegs = kConsumerBias_ ? 224 : 200;
  static_assert(4 * kProducerRegs + 8 * kConsumerRegs == 12 * 168, "the split must use the launch's registers");
  static_assert(!kWgmma_ || kWarps_ == 8, "the register split is sized for two consumer warpgroups");
  static constexpr int kThreads = (kWarps + kProducerWarps) * 32;
  static constexpr int kStages = kStages_;
  // Prior bias computed by the consumer warps (launched only when 16 % g == 0 and a prior is on). A separate
  // instance, so that the kernels without the bias keep their registers.
  static constexpr bool kConsumerBias = kConsumerBias_;
  using WithConsumerBias =
      AttendConfig<kHeadDim_, Element_, kWarps_, kStages_, kWgmma_, true, kTileSplit_, kPersistent_>;
  // The consumer bias with its table filled from Stage 1's bias lists where a CTA's tokens all have one
  // (bias_lists.cuh): an instance of its own for the one-item warpgroup tilings, so that the other instances keep
  // their code (with the list path compiled in, the kernels without lists ran 1.4 % slower; perf-log.md).
  static constexpr bool kListCapable = kWgmma_ && !kTileSplit_ && !kPersistent_;
  using WithBiasLists = AttendConfig<kHeadDim_, Element_, kWarps_, kStages_, kWgmma_, true, kTileSplit_, kPersistent_,
                                     kListCapable>;
  // Persistent (the warpgroup tiling, one CTA per SM): each CTA walks row blocks ("items") longest first, and two
  // otherwise idle warps of the producer warpgroup, the helpers, prepare item i + 1 (its union of tiles, counts,
  // tau / mu, Q and the first round of the bias table's k̄ columns) while the consumers run item i; the producer
  // and the record warp stream on into item i + 1's tiles. See attend_kernel.cuh.
  static constexpr bool kPersistent = kPersistent_;
  static_assert(!kPersistent_ || (kWgmma_ && !kTileSplit_), "persistent: the warpgroup tiling (helper warps)");
  // Tile split (decode): the consumer warps share one slab of 16 rows and take the union's tiles in turn, each
  // with its own online-softmax state, merged at the end. One warp per 16 rows left a decode CTA with a single
  // latency-bound warp; this gives it kWarps without more shared memory per CTA (two CTAs per SM still fit).
  static constexpr bool kTileSplit = kTileSplit_;
  // A stage's full barrier is waited on by parity, which cannot tell a phase from the one two fills later, so
  // each stage needs one owner that sees its fills in order: warp w takes stage w's tiles (kWarps == kStages).
  static_assert(!kTileSplit_ || (!kWgmma_ && kWarps_ == kStages_), "the tile split: an mma.sync tiling, warp = stage");
  static constexpr int kMinBlocks = kTileSplit_ ? 2 : 1;
  static constexpr int kRows = kTileSplit_ ? 16 : 16 * kWarps;
  static constexpr int kKSteps = kHeadDim / 16;     // k-steps of QK^T
  static constexpr int kONTiles = kHeadDim / 8;     // n-tiles of the O accumulator
  static constexpr bool kQInRegisters = kHeadDim <= 64;
  static constexpr int kRowPieces = kHeadDim / 8;   // 16-byte pieces per row
  static constexpr int kTileElems = kTileKeys * kHeadDim;
  static constexpr int kColBlocks = kHeadDim / 64;  // 128-byte column blocks of a K/V tile (one tensor-copy box each)
  static_assert(kHeadDim % 64 == 0, "the swizzle needs at least 8 16-byte pieces per row");
  static_assert(sizeof(Element) == 2, "tiles are laid out for 16-bit elements");

  // Dynamic shared memory (bytes), after aligning the base to 1024 (the 128-byte swizzle of the tensor copies
  // repeats every 8 rows of 128 bytes): K/V ring, Q, per-stage bias tables, mbarriers + counters, union bitset.
  static constexpr uint32_t kBlockBytes = kTileKeys * 128;  // one 64-key x 64-column box
  static constexpr uint32_t kTileBytes = uint32_t(kTileElems) * sizeof(Element);
  static constexpr size_t kRingBytes = size_t(kStages) * 2 * kTileBytes;
  // The bias table's staged k̄ columns (attend_table.cuh): D * 2 + 16 bytes each, in the ring's last stages. A
  // table that fits in fewer than all of them leaves the first stages to the producer, which fills them while
  // the table is built; a larger one takes the whole ring, in rounds.
  static constexpr int kKbarColBytes = kHeadDim * 2 + 16;
  // The columns that ns ring stages hold.
  __host__ __device__ static constexpr int kbar_staged_cols(int ns) {
    return int(size_t(ns) * 2 * kTileBytes / kKbarColBytes) / 8 * 8;
  }
  __host__ __device__ static constexpr int kbar_staging_stages(int n_pairs) {
    for (int ns = 1; ns < kStages; ++ns)
      if (kbar_staged_cols(ns) >= n_pairs) return ns;
    return kStages;
  }
  static constexpr size_t kQBytes = size_t(kRows) * kHeadDim * sizeof(Element);
  static constexpr int kBiasScratch = 4 * (kRows < 32 ? 32 : kRows);  // head weights of one batch of bias items
  // The producer's per-stage tables, or (consumer bias) each warp's τ/μ of its rows (32 floats) and the bias of
  // its rows for the current tile (64 floats).
  static constexpr size_t kBiasFloats = size_t(kStages) * kRows * 4 + kBiasScratch;
  // Stage 1's bias lists (bias_lists.cuh) staged for the wide one-item tilings at g = 16 (a consumer warp's 16 rows
  // are one token, whose list the warp copies at entry), in the bias area after the rows' parked τ / μ and
  // per-tile biases ([kWarps][32] floats, [kWarps][64] floats), which the table path leaves unused (the list
  // instance's area would grow if they did not fit). Each warp's count follows the entries ([kWarps] int32).
  static constexpr size_t kListStageOffset = size_t(96) * kWarps * sizeof(float);
  static constexpr size_t kListCountOffset = kListStageOffset + size_t(kWarps) * kBiasListStaged * 8;
  static constexpr bool kListsStaged = kBiasLists_;
  static_assert(!kBiasLists_ || (kConsumerBias_ && !kTileSplit_ && !kPersistent_),
                "bias lists: the one-item consumer-bias tilings");
  static constexpr size_t kBiasAreaBytes =
      (kBiasFloats > size_t(96) * kWarps ? kBiasFloats : size_t(96) * kWarps) * sizeof(float);
  static constexpr size_t kListAreaBytes = (kListCountOffset + size_t(kWarps) * 4 + 15) / 16 * 16;
  static constexpr size_t kBiasBytes =
      kBiasLists_ && kListAreaBytes > kBiasAreaBytes ? kListAreaBytes : kBiasAreaBytes;
  // Summaries k̄ of the chunks of each stage's tile (at most 4: C >= 16) for the consumers' bias MMA, rows padded
  // by 16 bytes so that the 4 rows an ldmatrix reads fall in distinct banks.
  static constexpr int kKbarRowElems = kHeadDim + 8;
  static constexpr uint32_t kKbarStageBytes = 4u * kKbarRowElems * sizeof(Element);
  static constexpr size_t kKbarBytes = kConsumerBias ? size_t(kStages) * kKbarStageBytes : 0;
  // Full and empty barriers, two counters, the ring hand-over barrier, full barriers that count the record warp,
  // the Q tensor copy's barrier (and 8 bytes that keep the records after it 16-byte aligned).
  static constexpr size_t kBarrierBytes = size_t(3 * kStages) * 8 + 32;
  // Warpgroup tilings: the record of each stage that the record warp (attend_tile_records) writes before its
  // arrival on the stage's full barrier: the tile index, which warpgroups attend it (a bit each) and each token's
  // attended keys, so that the consumers neither walk the union nor read mask words nor vote per tile.
  static constexpr int kMetaTokens = kRows;  // at most one token per row (g = 1)
  static constexpr size_t kMetaStageBytes = 16 + size_t(kMetaTokens) * 8;
  static constexpr size_t kMetaBytes = kWgmma_ ? size_t(kStages) * kMetaStageBytes : 0;
  // Persistent: per item buffer (two) tau / mu of each row, the item's hand-over mbarriers (union ready x 2, union
  // free x 2, prepared, preparation free), tile counts (2 x 2) and item index (2 x 8 bytes), then the dedicated
  // staging area of the bias table's first round of k̄ columns (the ring is the producer's for the whole kernel).
  static constexpr int kPrepStagedCols = 64;
  static constexpr size_t kPrepTauMuBytes = size_t(2) * kRows * 8;
  static constexpr size_t kPrepSyncBytes = 96;
  static constexpr size_t kPrepBytes =
      kPersistent_ ? kPrepTauMuBytes + kPrepSyncBytes + size_t(kPrepStagedCols) * kKbarColBytes : 0;
  // The union's tiles as an ascending list of 16-bit tile numbers (AttendItem::count_union), for the one-item wide
  // tilings and unions of at most 32 words (64 K keys): each k̄ column of the bias table is then one shared load
  // instead of a window scan over the union's words (PairColumns).
  static constexpr int kUnionListTiles = (!kTileSplit_ && !kPersistent_) ? 32 * 32 : 0;
  static constexpr size_t kUnionListOffset =
      kRingBytes + kQBytes + kBiasBytes + kKbarBytes + kBarrierBytes + kMetaBytes + kPrepBytes;
  static constexpr size_t kFixedBytes = kUnionListOffset + size_t(kUnionListTiles) * 2;
  // The union bitset (two with the persistent kernel: item i + 1's is built while item i's is walked), rounded
  // to 16 bytes.
  __host__ __device__ static size_t union_bytes(int union_words) {
    return ((size_t(union_words) * 4 + 15) & ~size_t(15)) * (kPersistent_ ? 2 : 1);
  }
  static size_t smem_bytes(int union_words) { return 1024 + kFixedBytes + union_bytes(union_words); }
};

// Element offset of (row, col) in a K/V tile: column blocks of 64 elements, each [64 rows][128 bytes] with the
// 16-byte pieces XOR-swizzled by row % 8, exactly the layout a 128-byte-swizzled tensor copy writes.
template <int kHeadDim>
__device__ __forceinline__ int kv_swz(int row, int col) {
  return (col >> 6) * (kTileKeys * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

// Element offset of (row, col) in Q: the same column-block layout as the K/V tiles with kRows rows per block (so
// that ldmatrix over 8 consecutive rows hits 8 different bank groups, and wgmma reads it as a K-major operand).
template <int kRows>
__device__ __forceinline__ int q_swz(int row, int col) {
  return (col >> 6) * (kRows * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

struct RowInfo {
  RowRouting route;
  int token_slot;  // token - first token of the CTA (index into the stage's bias table)
  bool valid;
};

__device__ __forceinline__ const uint32_t* mask_row_ptr(const AttendArgs& a, const SequenceSpan& sp, int kv_head,
                                                        int64_t token) {
  return static_cast<const uint32_t*>(a.mask.data) + row_output_offset(a.mask, sp, kv_head, token);
}
// A query token as the mask logic sees it (attend_masks.cuh).
__device__ __forceinline__ RowRouting token_routing(const AttendArgs& a, const SequenceSpan& sp, int kv_head,
                                                    int64_t token) {
  RowRouting rr;
  rr.pos = sp.n_k - sp.n_q + token;
  rr.diag = rr.pos >> a.log2_chunk;
  rr.mask_row = a.dense ? nullptr : mask_row_ptr(a, sp, kv_head, token);
  return rr;
}

// Iterates the set bits of the shared union bitset in ascending order.
struct TileCursor {
  int word;
  uint32_t bits;
  __device__ __forceinline__ int64_t next(const uint32_t* words) {
    while (bits == 0) bits = words[++word];
    const int b = __ffs(bits) - 1;
    bits &= bits - 1;
    return int64_t(word) * 32 + b;
  }
  // The bit position of the k-th (from 0) set tile at or after the cursor, without taking it: the cursor moves to
  // that tile's word and keeps its bits from there (the tile's own bit included).
  __device__ __forceinline__ int select(const uint32_t* words, int k) {
    int c = __popc(bits);
    while (k >= c) {
      k -= c;
      bits = words[++word];
      c = __popc(bits);
    }
    return int(__fns(bits, 0u, k + 1));
  }
};

}  // namespace dashattn::cuda
