// Stage-2 attention kernel: FlashAttention-2 style maths (mma.sync m16n8k16, ldmatrix, online softmax in
// registers) over the union of the routed key tiles of a block of query rows, with a producer warp.
//
// Rows. For one (sequence, KV head) the rows are the (query token, head of the group) pairs in token-major order,
// R = i * g + h. A CTA takes kRows = 16 * kWarps consecutive rows, so with g = 16 each consumer warp is one
// token's 16 heads (M = the GQA group), g < 16 packs several tokens into a warp and g > 16 splits a token over
// warps. Every row keeps its own mask, so any g works.
//
// Union tiling. The CTA ORs the 64-key tile sets of its tokens into a shared-memory bitset; a producer warp
// (attend_producer.cuh) walks it ascending and streams each K/V tile once into a ring of kStages buffers. On sm_90
// one lane issues tensor copies (one 64 x 64 box per 128 columns of K and of V, 128-byte swizzle) that complete as
// transactions on the stage's "full" mbarrier; elsewhere, and for the last partial tile of a sequence, the warp
// copies with cp.async.
// A single warp issuing 16-byte cp.async copies was the limit of this kernel (about 2 us per 32 KB tile on an
// H200, dense and sparse alike); the tensor copy takes that work off the warp.
//
// Prior bias. With g dividing 16 (a warp's rows are whole tokens) the producer also copies the summaries k̄ of
// the tile's chunks (at most 4) into the stage, and each consumer warp computes x = Q k̄^T for its rows as one
// extra m16n8k16 n-tile (on the wgmma path while the warpgroup's S = Q K^T is in flight), the heads' entmax
// weights from Stage 1's tau, their sum over the token's rows by a shuffle butterfly, then the bias; where the
// CTA's table of (tile, chunk) biases fits in shared memory they build it before the main loop instead
// (attend_table.cuh). Other groups span warps: the producer warp fills a per-stage table instead
// (fill_stage_bias), about 8 us per tile on an H200, which is why it is only the fallback.
//
// Consumer warps walk the same list independently: a warp whose rows attend none of
// a tile's keys only releases the stage ("empty" mbarrier) and moves on, so with random per-token routing the
// warps are not held in lock-step by the tiles other tokens chose. Rows that do not attend a key get -inf logits.
// The diagonal chunk is simply the last tiles. On the warpgroup (wgmma) path a second warp of the producer
// warpgroup, the record warp, walks the list too and writes with each stage the tile, its tokens' attended keys
// and which warpgroups attend it (attend_tile_records), so the consumers spend no instructions on the walk, the
// mask words or a per-tile vote: that bookkeeping drew about a quarter of their warp samples.
//
// Split-KV (decode). With num_splits > 1, split z of a row block takes the z-th equal share of the union's tiles
// (counted on the device, so work follows the routing, not the sequence length) and writes fp32 partials that
// combine_splits_kernel merges.
//
// Items. A CTA's row block, its preparation and its plan (which path, which tiles, where the bias comes from) are
// attend_item.cuh's; the persistent form's hand-over between roles is attend_persistent.cuh's.
//
// Persistent form (AttendConfig::kPersistent, d = 128 warpgroup tiling, opt-in through AttendPlan::persistent): one
// CTA per SM takes row blocks ("items") in turn, each running this kernel's per-item code (attend_persistent.cuh).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attend_args.cuh"
#include "attend_bias.cuh"
#include "attend_combine.cuh"
#include "attend_config.cuh"
#include "attend_item.cuh"
#include "attend_masks.cuh"
#include "attend_output.cuh"
#include "attend_persistent.cuh"
#include "attend_producer.cuh"
#include "attend_table.cuh"
#include "attend_wgmma.cuh"
#include "mma_tiles.cuh"
#include "phase_clocks.cuh"

// The warpgroup path's S = Q K^T takes Q from registers (loaded once per CTA) rather than from shared memory:
// with both operands in shared memory each m64n64k16 reads 4 KB for 131K FLOPs, which is the shared-memory
// bandwidth at the tensor-core peak before the tile copies and P V's reads of V. Build with
// -DDASHATTN_ATTEND_S_RS=0 for the shared-memory form.
#ifndef DASHATTN_ATTEND_S_RS
#define DASHATTN_ATTEND_S_RS 1
#endif

namespace dashattn::cuda {

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    attend_kernel(const AttendArgs a, const __grid_constant__ CUtensorMap tmap_k,
                  const __grid_constant__ CUtensorMap tmap_v, const __grid_constant__ CUtensorMap tmap_q,
                  const __grid_constant__ CUtensorMap tmap_o) {
  using Element = typename Cfg::Element;
  constexpr int D = Cfg::kHeadDim;
  constexpr int kStages = Cfg::kStages;
  constexpr bool kPersistent = Cfg::kPersistent;
  extern __shared__ __align__(1024) unsigned char smem_dyn[];
  unsigned char* smem_raw = smem_dyn + ((1024u - (mma::smem_addr(smem_dyn) & 1023u)) & 1023u);
  Element* sRing = reinterpret_cast<Element*>(smem_raw);
  Element* sQ = reinterpret_cast<Element*>(smem_raw + Cfg::kRingBytes);
  float* sBias = reinterpret_cast<float*>(smem_raw + Cfg::kRingBytes + Cfg::kQBytes);
  unsigned char* sKbar = smem_raw + Cfg::kRingBytes + Cfg::kQBytes + Cfg::kBiasBytes;
  unsigned char* sBar = sKbar + Cfg::kKbarBytes;
  int* sCount = reinterpret_cast<int*>(sBar + 2 * kStages * 8);
  unsigned char* sMeta = sBar + Cfg::kBarrierBytes;  // the warpgroup tilings' per-stage records (kMetaBytes)
  uint32_t* const sUnionBase = reinterpret_cast<uint32_t*>(smem_raw + Cfg::kFixedBytes);
  uint16_t* const sUnionList =
      Cfg::kUnionListTiles > 0 ? reinterpret_cast<uint16_t*>(smem_raw + Cfg::kUnionListOffset) : nullptr;
  uint32_t* sUnion = sUnionBase;  // the current item's (persistent: one of two)
  const uint32_t full_bar32 = mma::smem_addr(sBar);           // + 8 * stage: the producer's arrivals
  const uint32_t empty_bar = full_bar32 + 8u * kStages;       // + 8 * stage
  // Completes when every consumer lane is done reading the k̄ columns staged in the ring (the table fill), so
  // that the producer may start overwriting it (the 8 bytes after the two counters).
  const uint32_t ring_free_bar = empty_bar + 8u * kStages + 8u;
  // Full barriers that also count the record warp's arrivals (warpgroup tilings; attend_tile_records), taken by a
  // CTA that runs the warpgroup path: the per-warp path's CTAs keep the producer's alone.
  const uint32_t full_bar64 = ring_free_bar + 8u;
  // Completes when the CTA's Q rows have landed (a.q_tma: one tensor copy per 64-column block).
  const uint32_t q_bar = full_bar64 + 8u * kStages;
  // Persistent: the helpers' per-item buffers (AttendConfig::kPrepBytes) and the two unions (attend_persistent.cuh).
  const int64_t max_union_words = ceil_div(ceil_div(a.batch.padded_n_k, kTileKeys), 32) + 1;
  const PersistentItems pi = PersistentItems::carve<Cfg>(
      sMeta + Cfg::kMetaBytes, sUnionBase, int(Cfg::union_bytes(int(max_union_words)) / (kPersistent ? 8 : 4)));

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int split = blockIdx.z;
  const int g = a.group;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The producer's lane 0 issues every tensor copy, after the row block's union and plan: its descriptors are
  // fetched meanwhile.
  if (tid == Cfg::kWarps * 32 && a.use_tma) {
    mma::prefetch_tensormap(&tmap_k);
    mma::prefetch_tensormap(&tmap_v);
  }
#endif

  // The row block being worked on (attend_item.cuh): one per CTA (m_block from blockIdx.x, longest first, as
  // causal work grows with the row index), or with the persistent kernel each of the CTA's items in turn.
  AttendItem<Cfg> item;
  if constexpr (!kPersistent) item.begin(a, int64_t(gridDim.x) - 1 - blockIdx.x, blockIdx.y);
  if (tid == 0) phase_mark(PhaseKernel::kAttend, 0);
  ItemClock item_clock;  // profiling build only (phase_clocks.cuh); adds its sums at the thread's exit
  item_clock.start();

  constexpr bool kRecordWarp = Cfg::kWgmma;  // (then kMetaBytes > 0)
  // The barriers' initialisation and Q's tensor copies: the producer warp's lane 0 in the wide one-item tilings,
  // whose producer warp has no token of its own in the union of a group of 16 (warp 0's token was the union's last
  // to finish while warp 0 did this first); thread 0 in the persistent and decode tilings (decode Stage 2 took
  // ~1.3 us longer with the wide tilings' head: perf-log.md, thirty-third pass).
  constexpr bool kWideHead = AttendItem<Cfg>::kWideHead;
  const int init_tid = kWideHead ? Cfg::kWarps * 32 : 0;
  if (tid == init_tid) {
    for (int s = 0; s < kStages; ++s) {
      mma::mbar_init(full_bar32 + 8u * s, 32u);  // the producer warp's 32 lanes (+ copy completion)
      if (kRecordWarp) mma::mbar_init(full_bar64 + 8u * s, 64u);  // and the record warp's
      // Every lane of every consumer warp arrives (with the tile split, of the one warp whose turn the tile was):
      // an arrival releases only its own thread's reads of the stage, so one lane per warp would leave the
      // others' reads unordered against the producer's next writes.
      mma::mbar_init(empty_bar + 8u * s, uint32_t(Cfg::kTileSplit ? 32 : Cfg::kWarps * 32));
    }
    mma::mbar_init(ring_free_bar, uint32_t(Cfg::kWarps * 32));
    mma::mbar_init(q_bar, 1u);
    if constexpr (kPersistent) pi.init_barriers<Cfg>();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    mma::fence_barrier_init();
    if constexpr (!kPersistent) {
      // The rows are whole tokens here (the launcher sets q_tma only where g divides kRows): one box of kRows / g
      // tokens x g heads per 64 columns, written in q_swz's layout; tokens past the tensor read as zeros, and a
      // packed batch's rows of the next sequence are never used (their keys are all masked, their o not stored).
      if (a.q_tma && item.any_rows) item.copy_q_tensor(tmap_q, mma::smem_addr(sQ), q_bar);
    }
#endif
    sCount[0] = 0;  // tiles in the union
    sCount[1] = 0;  // tiles summed over the tokens (how much the tokens share)
  }
  if (tid == 0) item_clock.head_lap(0);
  // Bias modes. With g dividing 16 a warp's 16 rows are whole tokens, so the consumer warps compute the bias of
  // their rows themselves on the tensor cores (x = Q k̄^T for the tile's chunks, the group sum over the warp's
  // rows by shuffles); wider or odd groups span warps, and the producer warp fills per-stage tables instead.
  const bool bias_on = !a.dense && a.prior != PriorMode::kNone;
  // The launcher picks the instance: kConsumerBias implies bias_on and 16 % g == 0.
  constexpr bool bias_in_consumers = Cfg::kConsumerBias;
  const int per_tile = a.chunk >= kTileKeys ? 1 : (kTileKeys >> a.log2_chunk);
  // The item's plan from its union's counts, the same in every role.
  ItemPlan plan;

  // Stage 1's threshold tau of each consumer row's head and mu of its token, for the consumer-computed bias: loaded
  // here, at entry, so that their latency overlaps the Q copy and the union's mask loads instead of adding a round
  // trip (behind the other CTAs' tile streams) between the union and the bias table. Lane 4j of a consumer warp
  // holds the two rows lane / 4 and lane / 4 + 8 of its slab; they are parked in shared memory after the union.
  const int slab_row = Cfg::kTileSplit ? 0 : warp * 16;  // first row of this warp's 16-row slab
  float2 early_tau_mu[2] = {make_float2(0.0f, 0.0f), make_float2(0.0f, 0.0f)};
  // Stage 1's bias lists (bias_lists.cuh): each consumer warp copies its token's list at entry, so that the table
  // needs no x = Q k̄^T (attend_table.cuh).
  const bool lists_try = TokenListStage<Cfg>::applies(a, g) && item.any_rows;
  const TokenListStage<Cfg> list_stage(sBias, warp);
  if constexpr (!kPersistent) {
    // (Consumer warps only: the producer warpgroup's later code runs under its smaller register budget.) The wide
    // tilings load the mask word first: the union waits for it, the bias table much later for tau / mu.
    const bool early = warp < Cfg::kWarps;
    uint32_t early_word_wide = 0u;
    if constexpr (kWideHead) {
      if (early && item.any_rows) early_word_wide = item.early_union_word(a, warp, lane);
    }
    if (Cfg::kConsumerBias && item.any_rows && warp < Cfg::kWarps && lane % 4 == 0) {
#pragma unroll
      for (int half = 0; half < 2; ++half) early_tau_mu[half] = item.tau_mu(a, slab_row + lane / 4 + 8 * half);
    }
    // (A padding token's warp copies nothing; the table skips its rows.)
    if (lists_try && early && item.first_token + warp <= item.last_token)
      list_stage.copy(a, item.sp, item.kv_head, item.first_token + warp, lane);
    if (tid == 0) item_clock.head_lap(1);
    if (item.any_rows) {
      const uint32_t early_word =
          kWideHead ? early_word_wide : (early ? item.early_union_word(a, warp, lane) : 0u);
      item.build_union(a, sQ, reinterpret_cast<uint32_t*>(sRing), sUnion, sCount, sUnionList, tid, warp, lane,
                       early_word, early, item_clock);
    }
  }
  if (bias_in_consumers) {
    // Rows of the k̄ buffers past a tile's chunks are read by ldmatrix but never used: keep them finite.
    for (int i = tid; i < int(Cfg::kKbarBytes / 16); i += Cfg::kThreads)
      reinterpret_cast<uint4*>(sKbar)[i] = make_uint4(0u, 0u, 0u, 0u);
  }
  item_clock.warp_mark(1, lane);
  __syncthreads();  // union, count, Q (by cp.async) and the barrier initialisation are visible to every warp
  if constexpr (!kPersistent) {
    item_clock.warp_mark(2, lane);
    plan = plan_item(a, item, sUnion, split, per_tile, sCount[0], sCount[1], full_bar32, full_bar64);
    if (tid == 0) {
      phase_mark(PhaseKernel::kAttend, 2);
      item_clock.head_lap(8);
      item_clock.lap(0);
      phase_set_active(PhaseKernel::kAttend, plan.tile_count > 0, int(plan.tile_count));
    }
  }
  float* sTable = reinterpret_cast<float*>(smem_raw + a.bias_table_offset);
  // Persistent: the producer, record warp and consumers take item k from buffer k % 2 once the helpers have built
  // its union (false: no items left).
  auto take_item = [&](int k) {
    const int64_t j = pi.wait_item(k);
    if (j < 0) return false;
    begin_item_index(item, a, j);
    sUnion = pi.union_of(k & 1);
    plan = plan_item(a, item, sUnion, split, per_tile, pi.counts[2 * (k & 1)], pi.counts[2 * (k & 1) + 1],
                     full_bar32, full_bar64);
    return true;
  };

  // Each role sets its register budget inside its own branch: code reachable from both would have to fit the
  // smaller one, and ptxas then ignores the split.
  if (warp >= Cfg::kWarps) {
    if constexpr (Cfg::kProducerWarps > 1) wgmma::setmaxnreg_dec<Cfg::kProducerRegs>();
    if constexpr (kPersistent) {
      const int role = warp - Cfg::kWarps;  // 0: the producer, 1: the record warp, 2 and 3: the helpers
      if (role >= 2) {
        prepare_items<Cfg>(a, pi, sQ, tid - (Cfg::kWarps + 2) * 32, per_tile, full_bar32, full_bar64, tmap_q);
        return;
      }
      uint32_t ring_pos = 0;  // the ring's fills so far: stages and parities run on across items
      for (int k = 0; take_item(k); ++k) {
        stream_persistent_item<Cfg>(a, item, plan, role == 1, lane, per_tile, empty_bar, ring_free_bar, ring_pos,
                                    sRing, sKbar, sBias, sMeta, sUnion, tmap_k, tmap_v);
        ring_pos += uint32_t(plan.n_iter);
        mma::mbar_arrive(pi.union_free_bar + 8u * (k & 1));  // this lane is done with the item's union
      }
      return;
    } else {
      if constexpr (Cfg::kProducerWarps > 1) {
        if (plan.use_records && warp == Cfg::kWarps + 1) {
          attend_tile_records<Cfg>(a, item.sp, item.kv_head, lane, plan.cursor, plan.n_iter, item.row0,
                                   item.first_token, plan.n_tokens_cta, plan.full_bar, empty_bar, sMeta, sUnion);
          return;
        }
        if (warp > Cfg::kWarps) return;  // the producer warpgroup's idle warps
      }
      // The stages the table's k̄ columns occupy (the last ones) are filled only once the consumers release them;
      // the stages before them right away (-1: nothing staged, no wait).
      const int ring_free_from = plan.stage_kbar ? kStages - Cfg::kbar_staging_stages(plan.n_pairs) : -1;
      attend_produce<Cfg>(a, item.sp, item.seq, item.kv_head, lane, plan.cursor, plan.n_iter, item.first_token,
                          plan.n_tokens_cta, per_tile, plan.kbar_per_tile, plan.producer_table, plan.full_bar,
                          empty_bar, sRing, sKbar, sBias, sUnion, tmap_k, tmap_v, ring_free_from, ring_free_bar);
      return;
    }
  }

  // ---- Consumer warps ----
  if constexpr (Cfg::kProducerWarps > 1) wgmma::setmaxnreg_inc<Cfg::kConsumerRegs>();
  if (!kPersistent && a.q_tma && item.any_rows) mma::mbar_wait(q_bar, 0u);  // Q landed (its first reader is below)
  // Barrier of the consumer warps alone (named barrier 3).
  auto consumers_sync = [&]() { asm volatile("bar.sync 3, %0;\n" ::"n"(Cfg::kWarps * 32) : "memory"); };
  uint32_t ring_pos = 0;  // the ring's fills before the item (persistent: stages and parities run on)
  // One item per CTA, or (persistent) the CTA's items in turn.
  for (int k = 0;; ++k) {
    int buf = 0;  // the item's buffer of the helpers' preparations (persistent)
    if constexpr (kPersistent) {
      buf = k & 1;
      if (!take_item(k)) break;
      if (tid == 0) item_clock.lap(0);
    } else if (k > 0) {
      break;
    }
    auto make_row = [&](int r) {
      RowInfo ri;
      ri.valid = item.row0 + r < item.rows_in_seq;
      int head;
      item.split_row(r, ri.token_slot, head);
      const int64_t token = item.first_token + ri.token_slot;
      ri.route = RowRouting{nullptr, -1, 0};
      if (ri.valid) ri.route = token_routing(a, item.sp, item.kv_head, token);
      return ri;
    };
    // This thread's two rows of the warp's 16-row slab (fragment rows lane / 4 and lane / 4 + 8; all warps share
    // slab 0 with the tile split).
    const RowInfo row_a = make_row(slab_row + lane / 4);
    const RowInfo row_b = make_row(slab_row + lane / 4 + 8);
    MaskWordCache words_a, words_b;  // the rows' current mask words (the tile walk is ascending)
    // tau and mu (loaded at entry), constant over the tiles, parked in the (then unused) producer bias tables rather
    // than in registers: the warpgroup tiling runs at its register cap.
    // (Persistent: the helpers' buffer of the item's rows.)
    float2* row_tau_mu =
        kPersistent ? pi.tau_mu + buf * Cfg::kRows + warp * 16 : reinterpret_cast<float2*>(sBias) + warp * 16;
    // The bias of the current tile's chunks qd = 0..3 per row of this warp: [16][4].
    float* row_bias = sBias + Cfg::kWarps * 32 + warp * 16 * 4;
    if (!kPersistent && (plan.use_table || plan.kbar_per_tile)) {  // (the producer's tables, then unused, hold them)
      if (lane % 4 == 0) {
        row_tau_mu[lane / 4] = early_tau_mu[0];
        row_tau_mu[lane / 4 + 8] = early_tau_mu[1];
      }
      __syncwarp();
    }
    if (!kPersistent && tid == 0) phase_mark_ready(PhaseKernel::kAttend, 3, row_tau_mu[0].x);
    const uint32_t sKbar_addr = mma::smem_addr(sKbar) + uint32_t(lane % 4) * (Cfg::kKbarRowElems * 2u) +
                                uint32_t(lane / 8) * 16u;

    // The consumer-computed prior bias of this thread's two rows (attend_bias.cuh).
    const ConsumerRowBias<D> row_bias_of{a, g, lane, 1.0f / float(g), row_tau_mu, row_bias};

    float acc_o[Cfg::kONTiles][4];
#pragma unroll
    for (int i = 0; i < Cfg::kONTiles; ++i) acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.0f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

    // ldmatrix lane addresses. A lane's row r always has r % 8 == lane % 8, so its swizzled 16-byte piece for
    // column piece 2k + b is (2k) ^ (b ^ lane % 8): four variants (k % 4) per operand; the rest (k / 4, the
    // 16-row block, the stage) are plain offsets the compiler folds into the instructions.
    // Q and the K/V tiles are column blocks of 128-byte rows (q_swz(), kv_swz()).
    constexpr uint32_t kQBlockBytes = uint32_t(Cfg::kRows) * 128;
    constexpr uint32_t kTileBytes = Cfg::kTileBytes;
    constexpr uint32_t kKVRowBytes = 128;
    const int r8 = lane % 8;
    const uint32_t q_row = uint32_t(slab_row + r8 + 8 * ((lane / 8) % 2));
    const uint32_t k_row = uint32_t(r8 + 8 * (lane / 16));
    const uint32_t v_row = uint32_t(r8 + 8 * ((lane / 8) % 2));
    const uint32_t q_sel = uint32_t((lane / 16) ^ r8), k_sel = uint32_t(((lane / 8) % 2) ^ r8), v_sel = q_sel;
    uint32_t q_off[4], k_off[4], v_off[4];
#pragma unroll
    for (int var = 0; var < 4; ++var) {
      q_off[var] = q_row * 128u + (((2u * var) ^ q_sel) << 4);
      k_off[var] = k_row * kKVRowBytes + (((2u * var) ^ k_sel) << 4);
      v_off[var] = v_row * kKVRowBytes + (((2u * var) ^ v_sel) << 4);
    }
    const uint32_t sQ_addr = mma::smem_addr(sQ);
    const uint32_t sRing_addr = mma::smem_addr(sRing);

    uint32_t q_frag[Cfg::kQInRegisters ? Cfg::kKSteps : 1][4];
    if constexpr (Cfg::kQInRegisters) {
#pragma unroll
      for (int kk = 0; kk < Cfg::kKSteps; ++kk)
        mma::ldmatrix_x4(q_frag[kk], sQ_addr + q_off[kk % 4] + kQBlockBytes * (kk / 4));
    }
    // The A fragment of k-step kk of this warp's 16 Q rows: held in registers at d <= 64, else read from Q.
    auto q_fragment = [&](int kk, uint32_t (&qa)[4]) {
      if constexpr (Cfg::kQInRegisters) {
        qa[0] = q_frag[kk][0]; qa[1] = q_frag[kk][1]; qa[2] = q_frag[kk][2]; qa[3] = q_frag[kk][3];
      } else {
        mma::ldmatrix_x4(qa, sQ_addr + q_off[kk % 4] + kQBlockBytes * (kk / 4));
      }
    };
    const int t4 = lane % 4;

    if constexpr (kPersistent) {
      // The item's Q, tau / mu and first round of staged k̄ columns are in; with a table, every consumer warp is
      // done reading the previous item's entries (the table is one buffer, laid out per item).
      mma::mbar_wait(pi.prep_ready_bar, uint32_t(k & 1));
      if (plan.use_table && k > 0) consumers_sync();
    }
    if (tid == 0) item_clock.lap(1);
    // The warp's bias-list copies (issued at entry; only this warp reads them) have landed, whether the table takes
    // them or not: no copy may be left in flight at the warp's exit.
    if (lists_try) {
      mma::cp_async_wait<0>();
      __syncwarp();
    }
    if (plan.use_table) {
      fill_bias_table<Cfg>(TableFill{a, item.sp, item.seq, item.kv_head, warp, lane, g, row_a, row_b, plan.n_pairs,
                                     plan.n_tokens_cta, per_tile, plan.cursor, sUnion, item.union_words,
                                     kPersistent ? nullptr : item.union_list(sUnionList), int(plan.tile_start),
                                     reinterpret_cast<unsigned char*>(sRing), sTable, plan.stage_kbar,
                                     kPersistent ? 0u : ring_free_bar, kPersistent ? pi.kbar_stage : nullptr,
                                     lists_try, list_stage.entries, list_stage.count,
                                     lists_try && item.first_token + warp <= item.last_token
                                         ? TokenListStage<Cfg>::row(a, item.sp, item.kv_head, item.first_token + warp)
                                         : nullptr},
                           q_fragment, row_bias_of, consumers_sync);
    }
    if (tid == 0) {
      phase_mark(PhaseKernel::kAttend, 5);
      item_clock.lap(2);
    }

    // One k-step of x += Q k̄^T for the per-tile bias; an ldmatrix of the stage's k̄ buffer covers two k-steps.
    auto bias_x = [&](int stage, float (&xb)[4]) {
      const uint32_t kbar_addr = sKbar_addr + uint32_t(stage) * Cfg::kKbarStageBytes;
      uint32_t kb[4];
#pragma unroll
      for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
        uint32_t qa[4];
        q_fragment(kk, qa);
        if (kk % 2 == 0) mma::ldmatrix_x4(kb, kbar_addr + uint32_t(kk) * 32u);
        mma::mma_16816<Element>(xb, qa, kb[2 * (kk % 2)], kb[2 * (kk % 2) + 1]);
      }
    };

    // Logits of one tile (S in log2 units, bias and mask applied) and the online softmax update of m and l; S is
    // left holding P. Returns the factors the O accumulator must be rescaled by, which the caller applies once no
    // P V that writes O is in flight (rescale_o skips a warp whose factors are all 1).
    //
    // Two savings on the per-tile instruction count (the warpgroup loop issued ~500 instructions per tile and
    // warp before them, against 12 wgmma; perf-log.md, ninth pass):
    // - With one bias per row and tile (C >= 64, or no bias) the logits are fma(s, scale, b). The mask goes onto
    //   the raw scores and the row maximum is taken on them: fma is non-decreasing in s for scale > 0, so the
    //   largest logit is the logit of the largest score. The exponent then folds scale, bias and maximum into one
    //   fma per score, as FlashAttention does, instead of an fma and a subtraction.
    // - A tile that raises no row's maximum has rescale factors of exactly 1, and rescale_o skips the 64
    //   multiplies when that holds for every row of the warp (most tiles once the rows have seen a few).
    // The maximum itself stays exact, so the largest P of a peaked row is exactly 1 after rounding to bf16 (a lazy
    // maximum broke the conformance bound: perf-log.md, ninth pass).
    auto online_softmax = [&](float (&s)[8][4], int it, int stage, int64_t tile, uint64_t keys_a, uint64_t keys_b,
                              float& corr_a, float& corr_b) {
      const int64_t k0 = tile * kTileKeys;
      const float* stage_bias = sBias + size_t(stage) * Cfg::kRows * 4;  // filled by the producer with the tile
      // The bias of chunk qd of the tile for this thread's two rows (routed chunks c < c_i carry one; the diagonal
      // and masked ones 0).
      auto tile_bias = [&](int qd, float& ba, float& bb) {
        const int64_t c = (k0 >> a.log2_chunk) + qd;
        ba = 0.0f;
        bb = 0.0f;
        if (plan.use_table) {
          const float* tp = sTable + (it * per_tile + qd) * plan.n_tokens_cta;
          if (row_a.valid && c < row_a.route.diag) ba = tp[row_a.token_slot];
          if (row_b.valid && c < row_b.route.diag) bb = tp[row_b.token_slot];
        } else {
          const float* ta = plan.kbar_per_tile ? row_bias + (lane / 4) * 4 : stage_bias + row_a.token_slot * 4;
          const float* tb = plan.kbar_per_tile ? row_bias + (lane / 4 + 8) * 4 : stage_bias + row_b.token_slot * 4;
          if (row_a.valid && c < row_a.route.diag) ba = ta[qd];
          if (row_b.valid && c < row_b.route.diag) bb = tb[qd];
        }
      };
      // Logit = fma(s, row_scale, row bias): the raw score with the row's bias (C >= 64: one chunk per tile, two
      // loads per tile), or, with several chunks per tile, s already turned into the logit (scale 1, bias 0).
      float row_scale = a.scale_log2, ba = 0.0f, bb = 0.0f;
      if (bias_on && per_tile == 1) {
        tile_bias(0, ba, bb);
      } else if (bias_on) {
        row_scale = 1.0f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          float ta, tb;
          // An 8-key n-tile lies inside one chunk (C >= 16).
          tile_bias((nt * 8) >> a.log2_chunk, ta, tb);
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            s[nt][e] = fmaf(s[nt][e], a.scale_log2, ta);
            s[nt][2 + e] = fmaf(s[nt][2 + e], a.scale_log2, tb);
          }
        }
      }
      if ((keys_a & keys_b) != ~0ull) {  // most tiles are attended whole by both rows
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          const uint32_t wa = uint32_t(keys_a >> (nt * 8 + 2 * t4)), wb = uint32_t(keys_b >> (nt * 8 + 2 * t4));
          if (!(wa & 1u)) s[nt][0] = -INFINITY;
          if (!(wa & 2u)) s[nt][1] = -INFINITY;
          if (!(wb & 1u)) s[nt][2] = -INFINITY;
          if (!(wb & 2u)) s[nt][3] = -INFINITY;
        }
      }
      // Row maxima as a tree (depth 4, not a chain of 9: the softmax is on the loop's critical path).
      float ma[8], mb[8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        ma[nt] = fmaxf(s[nt][0], s[nt][1]);
        mb[nt] = fmaxf(s[nt][2], s[nt][3]);
      }
#pragma unroll
      for (int w = 4; w >= 1; w /= 2)
#pragma unroll
        for (int nt = 0; nt < w; ++nt) {
          ma[nt] = fmaxf(ma[nt], ma[nt + w]);
          mb[nt] = fmaxf(mb[nt], mb[nt + w]);
        }
      float mx_a = ma[0], mx_b = mb[0];
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
      // The rows' largest logits (-inf stays -inf: the scale is > 0 and the bias finite).
      const float new_a = fmaxf(m_a, fmaf(mx_a, row_scale, ba)), new_b = fmaxf(m_b, fmaf(mx_b, row_scale, bb));
      // A row's first keys move m from -inf: the factor is then 0, and O and l are still 0.
      corr_a = 1.0f;
      corr_b = 1.0f;
      if (new_a > m_a) {
        corr_a = mma::exp2_approx(m_a - new_a);
        m_a = new_a;
      }
      if (new_b > m_b) {
        corr_b = mma::exp2_approx(m_b - new_b);
        m_b = new_b;
      }
      // A row that has seen no key yet: subtracting 0 keeps exp2 at 0 instead of NaN.
      const float off_a = ba - (m_a == -INFINITY ? 0.0f : m_a);
      const float off_b = bb - (m_b == -INFINITY ? 0.0f : m_b);
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        s[nt][0] = mma::exp2_approx(fmaf(s[nt][0], row_scale, off_a));
        s[nt][1] = mma::exp2_approx(fmaf(s[nt][1], row_scale, off_a));
        s[nt][2] = mma::exp2_approx(fmaf(s[nt][2], row_scale, off_b));
        s[nt][3] = mma::exp2_approx(fmaf(s[nt][3], row_scale, off_b));
        // (The first pair starts the sums: 0 + x would cost an add, and P >= +0 makes it exact anyway.)
        sum_a = nt == 0 ? s[0][0] + s[0][1] : sum_a + (s[nt][0] + s[nt][1]);
        sum_b = nt == 0 ? s[0][2] + s[0][3] : sum_b + (s[nt][2] + s[nt][3]);
      }
      l_a = l_a * corr_a + sum_a;
      l_b = l_b * corr_b + sum_b;
    };
    auto rescale_o = [&](float corr_a, float corr_b) {
      if (!__any_sync(0xffffffffu, corr_a != 1.0f || corr_b != 1.0f)) return;  // most tiles: m did not move
#pragma unroll
      for (int i = 0; i < Cfg::kONTiles; ++i) {
        acc_o[i][0] *= corr_a;
        acc_o[i][1] *= corr_a;
        acc_o[i][2] *= corr_b;
        acc_o[i][3] *= corr_b;
      }
    };
    // P from the S registers (C layout of n-tiles 2j, 2j+1 = A layout of k-step j).
    auto pack_p = [&](const float (&s)[8][4], uint32_t (&pa)[4][4]) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        pa[j][0] = mma::pack2<Element>(s[2 * j][0], s[2 * j][1]);
        pa[j][1] = mma::pack2<Element>(s[2 * j][2], s[2 * j][3]);
        pa[j][2] = mma::pack2<Element>(s[2 * j + 1][0], s[2 * j + 1][1]);
        pa[j][3] = mma::pack2<Element>(s[2 * j + 1][2], s[2 * j + 1][3]);
      }
    };
    auto release_stage = [&](int stage) { mma::mbar_arrive(empty_bar + 8u * stage); };

    // Persistent: the consumers release Q and the staging area to the helpers (item k + 1's preparation) as soon
    // as they hold Q in registers, or else at the item's end.
    bool prep_released = false;
    if (plan.use_warpgroups) {
      // Warpgroup path, software-pipelined over the tiles the warpgroup attends: S = Q K^T of the next tile is
      // issued before P V of the current one, so the tensor cores work on both while the warps run the next
      // tile's softmax; O is rescaled only once that P V has completed. A stage is released after its P V.
      // Tiles none of the warpgroup's rows attend are waited for and released at once (one arrival per lane and
      // phase, as the producer expects).
      const uint32_t q_group = sQ_addr + uint32_t(warp / 4) * 64u * 128u;
      // This warp's 16 rows of Q as the A fragments of every k-step (the A layout of warp w % 4 of its warpgroup
      // is mma.sync's for rows 16 (w % 4) .. 16 (w % 4) + 15, which q_fragment reads). Never written again, so
      // the wgmmas that read them need no wait before the registers change.
      constexpr bool kSFromRegisters = DASHATTN_ATTEND_S_RS != 0;
      uint32_t qa[kSFromRegisters ? Cfg::kKSteps : 1][4];
      if constexpr (kSFromRegisters) {
#pragma unroll
        for (int kk = 0; kk < Cfg::kKSteps; ++kk) q_fragment(kk, qa[kk]);
        if constexpr (kPersistent) {
          mma::mbar_arrive(pi.prep_free_bar);  // (the ldmatrix reads are complete: their registers are in use)
          prep_released = true;
        }
      }
      struct Tile {
        int it, stage;
        int64_t tile;
        uint64_t keys_a, keys_b;
      };
      int next_it = 0;
      // The record warp's record of each stage (attend_tile_records) says which tile it holds, whether this
      // warpgroup attends it and the keys of every token: no union walk, mask reads or warpgroup vote here (that
      // bookkeeping drew about a quarter of the loop's warp samples in Nsight Compute). Tiles the warpgroup does not
      // attend are waited for and released at once (one arrival per lane and phase, as the producer expects).
      const int wg_bit = 1 << (warp / 4);
      // The next tile this warpgroup attends. It is never more than kStages - 1 tiles after cur, whose stage this
      // warpgroup still holds: the record warp marks the (kStages - 1)-th tile in a row that the warpgroup would
      // skip as attended (attend_tile_records), so the walk never waits for the refill of its own held stage.
      auto acquire = [&](Tile& t) {
        while (next_it < plan.n_iter) {
          t.it = next_it++;
          const uint32_t pos = ring_pos + uint32_t(t.it);
          t.stage = int(pos % kStages);
          mma::mbar_wait(plan.full_bar + 8u * t.stage, (pos / kStages) & 1u);
          const unsigned char* meta = sMeta + size_t(t.stage) * Cfg::kMetaStageBytes;
          // The vote is the flag itself (every lane reads the same word), but it tells ptxas the branch is
          // warp-uniform, so the tile counter, the stage and the 12 wgmma descriptors derived from it stay in
          // uniform registers: ~25 instructions per tile less (a plain load-and-branch made each descriptor a
          // vector computation and two R2UR moves), 2-6 % off Stage 2 on an H100 (perf-log.md, sixteenth pass).
          if (__any_sync(0xffffffffu, (*reinterpret_cast<const uint32_t*>(meta + 8) & wg_bit) != 0u)) {
            t.tile = *reinterpret_cast<const int64_t*>(meta);
            const uint64_t* keys = reinterpret_cast<const uint64_t*>(meta + 16);
            t.keys_a = row_a.valid ? keys[row_a.token_slot] : 0ull;
            t.keys_b = row_b.valid ? keys[row_b.token_slot] : 0ull;
            return true;
          }
          release_stage(t.stage);
        }
        return false;
      };
      auto issue_s = [&](const Tile& t, float (&s)[8][4]) {
        const uint32_t sK_addr = sRing_addr + uint32_t(t.stage) * 2u * kTileBytes;
        const uint64_t db0 = wgmma::desc_sw128(sK_addr, 16u, 1024u);
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
          // K-major operands; a k-step of 16 columns is 32 bytes into the 128-byte block.
          const uint32_t col = uint32_t(kk % 4) * 32u;
          const uint64_t db = wgmma::desc_advance(db0, Cfg::kBlockBytes * (kk / 4) + col);
          if constexpr (kSFromRegisters) {
            wgmma::mma_64x64x16_rs<Element>(s, qa[kk], db, kk > 0 ? 1 : 0);
          } else {
            const uint64_t da = wgmma::desc_sw128(q_group + kQBlockBytes * (kk / 4) + col, 16u, 1024u);
            wgmma::mma_64x64x16_ss<Element>(s, da, db, kk > 0 ? 1 : 0);
          }
        }
        wgmma::commit();
      };
      auto issue_pv = [&](const Tile& t, const uint32_t (&pa)[4][4]) {
        // V is MN-major: 64-column blocks kBlockBytes apart, 8-key groups 1024 bytes apart; k-step j = 16 keys.
        const uint32_t sV_addr = sRing_addr + uint32_t(t.stage) * 2u * kTileBytes + kTileBytes;
        const uint64_t dv0 = wgmma::desc_sw128(sV_addr, Cfg::kBlockBytes, 1024u);
        wgmma::fence();
#pragma unroll
        for (int j = 0; j < 4; ++j)
          wgmma::mma_64x128x16_rs<Element>(reinterpret_cast<float(&)[16][4]>(acc_o), pa[j],
                                           wgmma::desc_advance(dv0, uint32_t(j) * 16u * kKVRowBytes));
        wgmma::commit();
      };
      // The per-tile bias (no table): x = Q k̄^T on mma.sync while the S of the same tile is in flight.
      Tile cur, nxt;
      if (acquire(cur)) {
        if (tid == 0) {
          phase_mark(PhaseKernel::kAttend, 6);
          item_clock.lap(3);
        }
        float s[8][4] = {};
        uint32_t pa[4][4];
        float corr_a, corr_b;
        issue_s(cur, s);
        wgmma::wait<0>();
        online_softmax(s, cur.it, cur.stage, cur.tile, cur.keys_a, cur.keys_b, corr_a, corr_b);
        rescale_o(corr_a, corr_b);
        pack_p(s, pa);
        // (The last P V is issued on its own path: an S issued under a condition would reach the softmax through
        // a merge of register values, which makes ptxas serialize every wgmma.)
        while (true) {
          if (!acquire(nxt)) {
            issue_pv(cur, pa);
            wgmma::wait<0>();
            release_stage(cur.stage);
            break;
          }
          issue_s(nxt, s);
          issue_pv(cur, pa);
          wgmma::wait<1>();  // the S of nxt (committed first); the P V of cur may still run
          online_softmax(s, nxt.it, nxt.stage, nxt.tile, nxt.keys_a, nxt.keys_b, corr_a, corr_b);
          wgmma::wait<0>();  // P V of cur: O and cur's P registers and stage are free again
          release_stage(cur.stage);
          rescale_o(corr_a, corr_b);
          pack_p(s, pa);
          cur = nxt;
        }
      }
    } else {
      for (int it = 0; it < plan.n_iter; ++it) {
        const uint32_t pos = ring_pos + uint32_t(it);
        const int stage = int(pos % kStages);
        const uint32_t parity = (pos / kStages) & 1u;
        const int64_t tile = plan.cursor.next(sUnion);
        if (Cfg::kTileSplit && stage != warp) continue;  // another warp's stage
        // Mask reads first: their latency overlaps the wait for the tile.
        const uint64_t keys_a = row_tile_keys(row_a.route, words_a, tile, a.chunk, a.log2_chunk, a.dense);
        const uint64_t keys_b = row_tile_keys(row_b.route, words_b, tile, a.chunk, a.log2_chunk, a.dense);
        const bool need = __any_sync(0xffffffffu, (keys_a | keys_b) != 0ull);
        // Every warp waits for the tile, computing or not: a warp may release a stage only after the round it
        // releases was filled, which keeps exactly one arrival per lane in each phase of the empty barrier.
        mma::mbar_wait(plan.full_bar + 8u * stage, parity);
        if (tid == 0 && it == 0) {
          phase_mark(PhaseKernel::kAttend, 6);
          item_clock.lap(3);
        }
        if (lane == 0) phase_tile(it);
        if (need) {
          const uint32_t sK_addr = sRing_addr + uint32_t(stage) * 2u * kTileBytes;
          const uint32_t sV_addr = sK_addr + kTileBytes;
          // S = Q K^T for this warp's 16 rows and the tile's 64 keys (and x of the per-tile bias).
          float xb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          float s[8][4];
#pragma unroll
          for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
          if (plan.kbar_per_tile) bias_x(stage, xb);
#pragma unroll
          for (int kk = 0; kk < Cfg::kKSteps; ++kk) {
            uint32_t qa[4];
            q_fragment(kk, qa);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
              uint32_t b[4];
              // Key rows 16np + (lane % 8) + 8 * (lane / 16), head-dim columns 16kk + 8 * ((lane / 8) % 2).
              mma::ldmatrix_x4(b, sK_addr + k_off[kk % 4] + Cfg::kBlockBytes * (kk / 4) +
                                      uint32_t(np) * 16u * kKVRowBytes);
              mma::mma_16816<Element>(s[2 * np], qa, b[0], b[1]);
              mma::mma_16816<Element>(s[2 * np + 1], qa, b[2], b[3]);
            }
          }
          if (plan.kbar_per_tile) row_bias_of.store_tile(xb);
          float corr_a, corr_b;
          online_softmax(s, it, stage, tile, keys_a, keys_b, corr_a, corr_b);
          rescale_o(corr_a, corr_b);
          // O += P V.
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            uint32_t pa[4];
            pa[0] = mma::pack2<Element>(s[2 * j][0], s[2 * j][1]);
            pa[1] = mma::pack2<Element>(s[2 * j][2], s[2 * j][3]);
            pa[2] = mma::pack2<Element>(s[2 * j + 1][0], s[2 * j + 1][1]);
            pa[3] = mma::pack2<Element>(s[2 * j + 1][2], s[2 * j + 1][3]);
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
              uint32_t b[4];
              // Key rows 16j + (lane % 8) + 8 * ((lane / 8) % 2), head-dim columns 16dp + 8 * (lane / 16).
              mma::ldmatrix_x4_trans(b, sV_addr + v_off[dp % 4] + Cfg::kBlockBytes * (dp / 4) +
                                            uint32_t(j) * 16u * kKVRowBytes);
              mma::mma_16816<Element>(acc_o[2 * dp], pa, b[0], b[1]);
              mma::mma_16816<Element>(acc_o[2 * dp + 1], pa, b[2], b[3]);
            }
          }
        }
        release_stage(stage);
      }
    }
    if constexpr (kPersistent) {
      if (!prep_released) mma::mbar_arrive(pi.prep_free_bar);
      mma::mbar_arrive(pi.union_free_bar + 8u * buf);  // done with the union, counts and tau / mu of buffer buf
      ring_pos += uint32_t(plan.n_iter);
    }

    if (tid == 0) {
      phase_mark(PhaseKernel::kAttend, 7);
      item_clock.lap(4);
    }
    // Epilogue: finish the row sums across the quad, normalize, write o and lse (or the split partials).
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    if constexpr (Cfg::kTileSplit) {
      // Warp 0 merges every warp's state (warp order) and writes the rows; the others are done.
      if (!merge_warp_states<Cfg>(acc_o, m_a, m_b, l_a, l_b, reinterpret_cast<float*>(sRing), warp, lane)) return;
    }
    write_item_rows<Cfg>(a, item, split, sQ, slab_row, lane, row_a.valid, row_b.valid, m_a, m_b, l_a, l_b, acc_o,
                         tmap_o);
    if (tid == 0) {
      item_clock.lap(5);
      item_clock.item_done();
    }
  }  // items
  if (!kPersistent && tid == 0)
    phase_finish(PhaseKernel::kAttend,
                 "attend: entry / union / counts / tau-mu / first x / table / first tile / loop / written");
}

}  // namespace dashattn::cuda
