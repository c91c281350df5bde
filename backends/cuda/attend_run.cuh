// Definition of run_attend<HDIM, Element>: picks the compiled tiling for a plan and launches the Stage-2 kernel
// (plus the split combine). Included only by the generated attend_hdim<H>_<dtype>.cu instance files.
#pragma once

#include <algorithm>

#include "attend_kernel.cuh"
#include "attend_launch.cuh"
#include "attend_combine.cuh"

namespace dashattn::cuda {

template <class Cfg>
size_t config_smem_bytes(const AttendArgs& args) {
  const int64_t union_words = ceil_div(ceil_div(args.batch.padded_n_k, kTileKeys), 32) + 1;
  return Cfg::WithConsumerBias::smem_bytes(int(union_words));  // the larger of the two instances
}

// The consumer warps compute the prior bias when each warp's 16 rows are whole tokens (g divides 16).
inline bool bias_in_consumers(const AttendArgs& args) {
  return !args.dense && args.prior != PriorMode::kNone && 16 % args.group == 0;
}

inline int device_smem_optin() {
  int device = 0, optin = 0;
  DASHATTN_CUDA_CHECK(cudaGetDevice(&device));
  DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return optin;
}

// max_ctas: the persistent kernel's grid (0: one CTA per SM); ignored by the other tilings.
template <class Cfg>
void launch_attend_instance(AttendArgs args, bool allow_tma, cudaStream_t stream, int max_ctas = 0) {
  const int64_t rows = args.batch.padded_n_q * args.group;
  const int64_t m_blocks = ceil_div(rows, Cfg::kRows);
  const int64_t union_words = ceil_div(ceil_div(args.batch.padded_n_k, kTileKeys), 32) + 1;
  size_t smem = Cfg::smem_bytes(int(union_words));
  int device = 0, optin = 0;
  DASHATTN_CUDA_CHECK(cudaGetDevice(&device));
  DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  args.bias_table_floats = 0;
  if constexpr (Cfg::kConsumerBias) {
    if (args.allow_bias_table) {
      // One float per (union tile, chunk of the tile, token of the CTA); the decode tiling keeps its
      // CTAs per SM and takes at most 4 KB, the wide tilings (one CTA per SM) what shared memory has left.
      const size_t offset = Cfg::kFixedBytes + Cfg::union_bytes(int(union_words));
      const int64_t per_tile = args.chunk >= kTileKeys ? 1 : kTileKeys / args.chunk;
      const int64_t want = ceil_div(args.batch.padded_n_k, kTileKeys) * per_tile * (Cfg::kRows / args.group);
      const int64_t room = (int64_t(optin) - 1024 - int64_t(offset)) / 4;
      const int64_t floats =
          std::min<int64_t>(std::min<int64_t>(want, Cfg::kTileSplit || Cfg::kWarps == 1 ? 1024 : room), INT32_MAX);
      if (floats > 0) {
        args.bias_table_floats = int(floats);
        args.bias_table_offset = uint32_t(offset);
        smem = 1024 + offset + size_t(floats) * 4;
      }
    }
  }
  if (smem > size_t(optin)) {
    throw Unsupported("cuda", "k",
                      "key length " + std::to_string(args.batch.padded_n_k) + " needs " + std::to_string(smem) +
                          " bytes of shared memory per block, more than the device's " + std::to_string(optin));
  }
  DASHATTN_CUDA_CHECK(cudaFuncSetAttribute(attend_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(smem)));
  const int64_t heads = int64_t(args.num_seqs) * args.h_kv;
  if (heads > kMaxGridYZ || args.num_splits > kMaxGridYZ || m_blocks > int64_t(INT32_MAX)) {
    throw Unsupported("cuda", "q", "batch x KV heads = " + std::to_string(heads) + " exceeds the grid limit");
  }
  // Tensor maps are encoded on the host per launch (pure host work, captured by value into a graph).
  CUtensorMap tmap_k{}, tmap_v{};
  int major = 0;
  DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  constexpr DType kDType = ElementTraits<typename Cfg::Element>::kDType;
  args.use_tma = allow_tma && major >= 9 && make_kv_tensor_map(args.k, kDType, Cfg::kHeadDim, &tmap_k) &&
                 make_kv_tensor_map(args.v, kDType, Cfg::kHeadDim, &tmap_v);
  // The wide tilings (one item per CTA, and the persistent form's helpers) also take Q by tensor copy where a CTA's
  // rows are whole tokens (g divides kRows); the one-item tilings store a warp's staged o rows by tensor store where
  // those are whole tokens or whole blocks of 16 heads.
  CUtensorMap tmap_q{}, tmap_o{};
  args.q_tma = args.o_tma = false;
  if (args.use_tma && !Cfg::kTileSplit && row_tensor_copies_allowed()) {
    const int g = args.group;
    args.q_tma = Cfg::kRows % g == 0 &&
                 make_row_tensor_map(args.q, kDType, Cfg::kHeadDim, g, Cfg::kRows / g, &tmap_q);
    // (Not the persistent form: it writes o from its fragments, since the helpers refill the Q buffer, where o would
    // be staged, during the item.)
    args.o_tma = !Cfg::kPersistent && args.num_splits == 1 && args.o_dtype == kDType &&
                 (16 % g == 0 || g % 16 == 0) &&
                 make_row_tensor_map(args.o, kDType, Cfg::kHeadDim, std::min(g, 16), std::max(1, 16 / g), &tmap_o);
  }
  dim3 grid(unsigned(m_blocks), unsigned(heads), unsigned(args.num_splits));
  if constexpr (Cfg::kPersistent) {
    // One CTA per SM (the shared memory allows no more), each walking items (row block, sequence x KV head).
    int sms = 0;
    DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int64_t ctas = std::min<int64_t>(m_blocks * heads, max_ctas > 0 ? max_ctas : sms);
    grid = dim3(unsigned(std::max<int64_t>(ctas, 1)), 1u, 1u);
    if (args.item_counter != nullptr)
      DASHATTN_CUDA_CHECK(cudaMemsetAsync(args.item_counter, 0, sizeof(unsigned long long), stream));
  }
  attend_kernel<Cfg><<<grid, Cfg::kThreads, smem, stream>>>(args, tmap_k, tmap_v, tmap_q, tmap_o);
  DASHATTN_CUDA_CHECK_LAUNCH();
#ifdef DASHATTN_ITEM_CLOCKS
  item_clock_report<<<1, 1, 0, stream>>>();  // profiling build only (phase_clocks.cuh)
#endif
  if (args.num_splits > 1) {
    const int64_t split_rows = int64_t(args.num_seqs) * args.h_q * args.batch.padded_n_q;
    constexpr int kRowsPerBlock = 4;
    combine_splits_kernel<Cfg::kHeadDim>
        <<<unsigned(ceil_div(split_rows, kRowsPerBlock)), kRowsPerBlock * 32, 0, stream>>>(args);
    DASHATTN_CUDA_CHECK_LAUNCH();
  }
}

template <class Cfg>
void launch_attend_config(const AttendArgs& args, bool allow_tma, cudaStream_t stream, int max_ctas = 0) {
  if (bias_in_consumers(args)) {
    // Stage 1's bias lists reach the warpgroup tilings' table at g = 16 (a warp's rows one token; bias_lists.cuh).
    if constexpr (Cfg::kListCapable) {
      if (args.lists.on() && args.group == 16) {
        launch_attend_instance<typename Cfg::WithBiasLists>(args, allow_tma, stream, max_ctas);
        return;
      }
    }
    launch_attend_instance<typename Cfg::WithConsumerBias>(args, allow_tma, stream, max_ctas);
  } else
    launch_attend_instance<Cfg>(args, allow_tma, stream, max_ctas);
}

template <int kHeadDim, typename Element>
void run_attend(const AttendArgs& args_in, const AttendPlan& plan, cudaStream_t stream) {
  AttendArgs args = args_in;
  args.allow_bias_table = plan.bias_table;
  // Ring depth: three K/V tiles for the wide tilings (one CTA per SM, within an A100's 163 KB); the decode
  // decode tiling keeps two or more CTAs per SM (decode_stages() in attend_launch.cuh).
  constexpr int kStagesWide = kHeadDim <= 128 ? 3 : 2;
  constexpr int kStagesDecode = decode_stages(kHeadDim);
  // One decode warp per ring stage: the tile split gives each stage a fixed owner (see AttendConfig).
  constexpr int kDecodeWarps = kStagesDecode;
  // Consumer warps: 4 sharing one slab (decode), 4, 7 or 8 (wgmma, below). Seven plus the producer make 8 warps = 2 per SM sub-partition, which
  // keeps the full 255 registers per thread (a ninth warp puts 3 warps on one sub-partition and caps them at 168,
  // which spills).
  if (plan.warps == 1) {
    // One 16-row slab per CTA (decode): a consumer warp per ring stage takes that stage's tiles (the tile split).
    launch_attend_config<AttendConfig<kHeadDim, Element, kDecodeWarps, kStagesDecode, false, false, true>>(
        args, plan.tma, stream);
    return;
  }
  if constexpr (kHeadDim == 128) {
    // Eight consumer warps = two warpgroups on wgmma (sm_90a), each computing 64 rows = 4 tokens x 16 heads per
    // tile. Nine warps cap registers at 168, which the wgmma path fits (its B operands need no address registers).
    if (plan.warps >= 8) {
      int device = 0, major = 0;
      DASHATTN_CUDA_CHECK(cudaGetDevice(&device));
      DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
      if (major >= 9) {
        using Wide = AttendConfig<kHeadDim, Element, 8, 4, true>;
        // The persistent form of the 4-stage tiling where it applies (no key split, shared memory for its
        // second union and staging area; a paged batch streams through its general producer walk).
        using Persistent = AttendConfig<kHeadDim, Element, 8, 4, true, false, false, true>;
        if (plan.persistent && args.num_splits == 1 && plan.stages != 3 &&
            config_smem_bytes<Persistent>(args) <= size_t(device_smem_optin())) {
          launch_attend_config<Persistent>(args, plan.tma, stream, plan.persistent_ctas);
          return;
        }
        if (plan.stages == 3 || config_smem_bytes<Wide>(args) > size_t(device_smem_optin()))
          launch_attend_config<AttendConfig<kHeadDim, Element, 8, 3, true>>(args, plan.tma, stream);
        else
          launch_attend_config<Wide>(args, plan.tma, stream);
        return;
      }
    }
  }
  if constexpr (kHeadDim <= 128) {
    if (plan.warps >= 7) {
      // A fourth stage (about 160 KB in all at d = 128) keeps one more tile in flight where the device has the
      // shared memory for it (sm_90: 227 KB; an A100's 163 KB does not).
      if constexpr (kHeadDim == 128) {
        using Deep = AttendConfig<kHeadDim, Element, 7, 4>;
        if (plan.stages == 4 ||
            (plan.stages == 0 && config_smem_bytes<Deep>(args) <= size_t(device_smem_optin()))) {
          launch_attend_config<Deep>(args, plan.tma, stream);
          return;
        }
      }
      launch_attend_config<AttendConfig<kHeadDim, Element, 7, kStagesWide>>(args, plan.tma, stream);
      return;
    }
  }
  launch_attend_config<AttendConfig<kHeadDim, Element, 4, kStagesWide>>(args, plan.tma, stream);
}

}  // namespace dashattn::cuda
