// The persistent Stage-2 kernel's hand-over between roles (AttendConfig::kPersistent; see attend_kernel.cuh).
//
// One CTA per SM takes items (attend_item.cuh) in turn, from an item counter. Item k of the CTA uses buffer
// b = k % 2 of the union, counts, item index and tau / mu. The producer warpgroup's two otherwise idle warps, the
// helpers, prepare it: once its previous user (item k - 2) is done with the buffer, the union and counts ("union
// ready": the producer and the record warp start on it, the ring's stages and barrier parities running on across
// items); once the consumers hold item k - 1's Q in registers and are done with the staging area, tau / mu, Q and
// the bias table's first round of k̄ columns ("prepared"). The record warp writes records for every item so that
// the full barriers count the same arrivals whichever path an item takes. Each item runs the code of the
// one-item-per-CTA kernel, and the output is bitwise the same. Not the default: it lacks the one-item kernel's newer
// head (Q by tensor copy, the union without atomics) and is 4-11 % slower on an H100 (perf-log.md, twelfth,
// twenty-fifth and thirty-fourth passes).
#pragma once

#include <cstdint>

#include "attend_args.cuh"
#include "attend_config.cuh"
#include "attend_item.cuh"
#include "attend_producer.cuh"
#include "attend_table.cuh"
#include "attend_wgmma.cuh"
#include "mma_tiles.cuh"

namespace dashattn::cuda {

// The hand-over state in shared memory (AttendConfig::kPrepBytes, then the two unions).
struct PersistentItems {
  float2* tau_mu;             // [2][kRows]
  uint32_t union_ready_bar;   // + 8 b: helpers -> all roles
  uint32_t union_free_bar;    // + 8 b: producer, record warp, consumers -> helpers
  uint32_t prep_ready_bar;    // Q, tau / mu, k̄ staged: helpers -> consumers
  uint32_t prep_free_bar;     // Q and the staging area read: consumers -> helpers
  int* counts;                // [2][2]: tiles in the union, tiles summed over the tokens
  int64_t* index;             // [2]: the item, or -1 past the last
  unsigned char* kbar_stage;  // the table's first round of k̄ columns (kPrepStagedCols)
  uint32_t* unions;           // [2][union_stride]
  int union_stride;

  template <class Cfg>
  __device__ __forceinline__ static PersistentItems carve(unsigned char* prep, uint32_t* unions, int union_stride) {
    PersistentItems p;
    p.tau_mu = reinterpret_cast<float2*>(prep);
    p.union_ready_bar = mma::smem_addr(prep + Cfg::kPrepTauMuBytes);
    p.union_free_bar = p.union_ready_bar + 16u;
    p.prep_ready_bar = p.union_ready_bar + 32u;
    p.prep_free_bar = p.union_ready_bar + 40u;
    p.counts = reinterpret_cast<int*>(prep + Cfg::kPrepTauMuBytes + 48);
    p.index = reinterpret_cast<int64_t*>(prep + Cfg::kPrepTauMuBytes + 64);
    p.kbar_stage = prep + Cfg::kPrepTauMuBytes + Cfg::kPrepSyncBytes;
    p.unions = unions;
    p.union_stride = union_stride;
    return p;
  }
  // By one thread, before the CTA's first barrier.
  template <class Cfg>
  __device__ __forceinline__ void init_barriers() const {
    for (int b = 0; b < 2; ++b) {
      mma::mbar_init(union_ready_bar + 8u * b, 64u);                             // the two helper warps
      mma::mbar_init(union_free_bar + 8u * b, uint32_t(64 + Cfg::kWarps * 32));  // producer, record, consumers
    }
    mma::mbar_init(prep_ready_bar, 64u);
    mma::mbar_init(prep_free_bar, uint32_t(Cfg::kWarps * 32));
  }
  __device__ __forceinline__ uint32_t* union_of(int b) const { return unions + b * union_stride; }
  // The item of buffer k % 2 once its union is ready (-1: no items left).
  __device__ __forceinline__ int64_t wait_item(int k) const {
    const int b = k & 1;
    mma::mbar_wait(union_ready_bar + 8u * b, uint32_t((k >> 1) & 1));
    return index[b];
  }
};

// Items go head by head (sequence x KV head), longest first within each, as the one-item-per-CTA grid runs, so
// that the CTAs at work share one head's K/V in L2 (32 MB at 64K, d = 128; two heads' items interleaved ran chunk
// masks 2-6 % slower).
template <class Cfg>
__device__ __forceinline__ void begin_item_index(AttendItem<Cfg>& item, const AttendArgs& a, int64_t j) {
  const int64_t blocks = ceil_div(a.batch.padded_n_q * a.group, Cfg::kRows);
  item.begin(a, blocks - 1 - j % blocks, int(j / blocks));
}

// The CTA's item k (-1 past the last). The first is blockIdx.x, the next ones come from the item counter as CTAs
// finish (the hardware's order for a one-item-per-CTA grid; with a fixed assignment Nsight Compute had SMs idle
// for ~4 % of the kernel with random masks). Without a counter: rounds of gridDim.x items, snaking (odd rounds
// reversed) so that every CTA's sum of work comes out about even. Called by one thread per item, in order.
template <class Cfg>
__device__ __forceinline__ int64_t persistent_item(const AttendArgs& a, int k) {
  const int64_t items = ceil_div(a.batch.padded_n_q * a.group, Cfg::kRows) * a.num_seqs * a.h_kv;
  int64_t j;
  if (k == 0) j = blockIdx.x;
  else if (a.item_counter != nullptr) j = int64_t(gridDim.x) + int64_t(atomicAdd(a.item_counter, 1ull));
  else j = int64_t(k) * gridDim.x + ((k & 1) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
  return j < items ? j : -1;
}

// The helper warps' loop (htid = 0 .. 63 over the two warps). per_tile and the full barriers as for plan_item.
template <class Cfg>
__device__ __forceinline__ void prepare_items(const AttendArgs& a, const PersistentItems& pi,
                                              typename Cfg::Element* sQ, int htid, int per_tile, uint32_t full_bar32,
                                              uint32_t full_bar64, const CUtensorMap& tmap_q) {
  const int lane = htid % 32, hw = htid / 32;
  auto helpers_sync = [&]() { asm volatile("bar.sync 4, 64;\n" ::: "memory"); };
  AttendItem<Cfg> item;
  for (int k = 0;; ++k) {
    const int b = k & 1;
    if (k >= 2) mma::mbar_wait(pi.union_free_bar + 8u * b, uint32_t(((k >> 1) - 1) & 1));
    if (htid == 0) pi.index[b] = persistent_item<Cfg>(a, k);
    helpers_sync();
    const int64_t j = pi.index[b];
    if (j < 0) {  // the end: the other roles see -1 in the buffer
      mma::mbar_arrive(pi.union_ready_bar + 8u * b);
      return;
    }
    begin_item_index(item, a, j);
    uint32_t* words = pi.union_of(b);
    int* counts = pi.counts + 2 * b;
    for (int w = htid; w < item.union_words; w += 64) words[w] = 0u;
    if (htid < 2) counts[htid] = 0;
    helpers_sync();
    if (item.any_rows) item.union_tokens(a, words, counts, hw, 2, lane);
    helpers_sync();
    if (item.any_rows) item.count_union(words, counts, htid, 64, lane);
    helpers_sync();
    mma::mbar_arrive(pi.union_ready_bar + 8u * b);
    const ItemPlan plan = plan_item(a, item, words, 0, per_tile, counts[0], counts[1], full_bar32, full_bar64);
    if (k >= 1) mma::mbar_wait(pi.prep_free_bar, uint32_t((k - 1) & 1));
    if (Cfg::kConsumerBias && item.any_rows) {
      for (int r = htid; r < Cfg::kRows; r += 64) pi.tau_mu[b * Cfg::kRows + r] = item.tau_mu(a, r);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (a.q_tma) {
      // One tensor copy by the first helper lane, counted on the prepared barrier (its 64 arrivals below complete the
      // phase only once the bytes have landed too). The consumers' reads of the last item's Q (generic proxy) were
      // ordered before the wait for prep_free; the fence orders them before the copy's writes (async proxy).
      if (htid == 0 && item.any_rows) {
        wgmma::fence_proxy_async();
        item.copy_q_tensor(tmap_q, mma::smem_addr(sQ), pi.prep_ready_bar, false);
      }
    } else
#endif
    if (item.any_rows) item.copy_q(a, sQ, htid, 64);
    if (plan.use_table) {
      PairColumns cols(plan.cursor, words, item.union_words, plan.n_pairs, per_tile, a.log2_chunk);
      copy_kbar_columns<Cfg>(a, item.sp, item.seq, item.kv_head, cols, 0, ::min(plan.n_pairs, Cfg::kPrepStagedCols),
                             8 * hw, 16, lane, pi.kbar_stage);
    }
    mma::cp_async_wait<0>();
    // Q copied by cp.async is read by the tensor cores. After Q's tensor copy the fence orders nothing that needs it
    // (the k̄ columns are read by ldmatrix), but skipping it there, like writing the branch above without the `else`
    // across the #endif, raised the spills under the producer warpgroup's register cap, which the helpers share
    // (724 → 792 bytes).
    if constexpr (Cfg::kWgmma) wgmma::fence_proxy_async();
    mma::mbar_arrive(pi.prep_ready_bar);
  }
}

// One item of the persistent kernel's tile stream, by the producer warp or (record) the record warp: the records of
// a warpgroup item, or on a per-warp item, which reads none, only the arrivals that keep the full barriers' phases;
// the tiles of an item whose tiles are all whole and carry no per-tile bias data through the tensor-copy-only loop
// (contiguous K/V: it keeps no page translation), other items, and every item of a paged batch, through the general
// walk. (The general loops, at the producer warpgroup's 56 registers inside the
// item loop, reloaded ~36 spilled values per tile between them, which set the pace of per-token masks' stream:
// perf-log.md, twenty-fifth pass.) ring_pos: the ring's fills before this item.
template <class Cfg>
__device__ __forceinline__ void stream_persistent_item(const AttendArgs& a, const AttendItem<Cfg>& item,
                                                       const ItemPlan& plan, bool record, int lane, int per_tile,
                                                       uint32_t empty_bar, uint32_t ring_free_bar, uint32_t ring_pos,
                                                       typename Cfg::Element* sRing, unsigned char* sKbar,
                                                       float* sBias, unsigned char* sMeta, const uint32_t* sUnion,
                                                       const CUtensorMap& tmap_k, const CUtensorMap& tmap_v) {
  if (record && !plan.use_warpgroups) {
    attend_stage_arrivals<Cfg>(plan.n_iter, plan.full_bar, empty_bar, ring_pos);
  } else if (record) {
    attend_tile_records<Cfg>(a, item.sp, item.kv_head, lane, plan.cursor, plan.n_iter, item.row0, item.first_token,
                             plan.n_tokens_cta, plan.full_bar, empty_bar, sMeta, sUnion, ring_pos);
  } else if (a.use_tma && !plan.kbar_per_tile && !plan.producer_table && item.sp.n_k % kTileKeys == 0 &&
             a.pages.table == nullptr) {
    attend_produce_whole_tiles<Cfg>(lane, plan.cursor, plan.n_iter, plan.full_bar, empty_bar, sRing, sUnion, tmap_k,
                                    tmap_v, item.sp.k_begin, item.kv_head, int(item.sp.batch_index), ring_pos);
  } else {
    attend_produce<Cfg>(a, item.sp, item.seq, item.kv_head, lane, plan.cursor, plan.n_iter, item.first_token,
                        plan.n_tokens_cta, per_tile, plan.kbar_per_tile, plan.producer_table, plan.full_bar,
                        empty_bar, sRing, sKbar, sBias, sUnion, tmap_k, tmap_v, -1, ring_free_bar, ring_pos);
  }
}

}  // namespace dashattn::cuda
