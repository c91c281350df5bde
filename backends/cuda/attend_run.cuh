// Definition of run_attend<HDIM, Element>: picks the compiled tiling for a plan and launches the Stage-2 kernel
// (plus the split combine). Included only by the generated attend_hdim<H>_<dtype>.cu instance files.
#pragma once

#include "attend_kernel.cuh"
#include "attend_launch.cuh"
#include "attend_combine.cuh"

namespace dashattn::cuda {

template <class Cfg>
void launch_attend_config(const AttendArgs& args, cudaStream_t stream) {
  const int64_t rows = args.batch.padded_n_q * args.group;
  const int64_t m_blocks = ceil_div(rows, Cfg::kRows);
  const int64_t union_words = ceil_div(ceil_div(args.batch.padded_n_k, kTileKeys), 32) + 1;
  const size_t smem = Cfg::smem_bytes(int(union_words));
  int device = 0, optin = 0;
  DASHATTN_CUDA_CHECK(cudaGetDevice(&device));
  DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
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
  const dim3 grid(unsigned(m_blocks), unsigned(heads), unsigned(args.num_splits));
  attend_kernel<Cfg><<<grid, Cfg::kThreads, smem, stream>>>(args);
  DASHATTN_CUDA_CHECK_LAUNCH();
  if (args.num_splits > 1) {
    const int64_t split_rows = int64_t(args.num_seqs) * args.h_q * args.batch.padded_n_q;
    constexpr int kRowsPerBlock = 4;
    combine_splits_kernel<Cfg::kHeadDim>
        <<<unsigned(ceil_div(split_rows, kRowsPerBlock)), kRowsPerBlock * 32, 0, stream>>>(args);
    DASHATTN_CUDA_CHECK_LAUNCH();
  }
}

template <int kHeadDim, typename Element>
void run_attend(const AttendArgs& args, const AttendPlan& plan, cudaStream_t stream) {
  // Ring depth: three K/V tiles for the wide tilings (one CTA per SM, within an A100's 163 KB); the one-warp
  // decode tiling keeps two or more CTAs per SM (decode_stages() in attend_launch.cuh).
  constexpr int kStagesWide = kHeadDim <= 128 ? 3 : 2;
  constexpr int kStagesDecode = decode_stages(kHeadDim);
  // Consumer warps: 1 (decode), 4 or 7. Seven plus the producer make 8 warps = 2 per SM sub-partition, which
  // keeps the full 255 registers per thread (a ninth warp would cap them at 168 and spill).
  if (plan.warps == 1) {
    launch_attend_config<AttendConfig<kHeadDim, Element, 1, kStagesDecode>>(args, stream);
    return;
  }
  if constexpr (kHeadDim <= 128) {
    if (plan.warps >= 7) {
      launch_attend_config<AttendConfig<kHeadDim, Element, 7, kStagesWide>>(args, stream);
      return;
    }
  }
  launch_attend_config<AttendConfig<kHeadDim, Element, 4, kStagesWide>>(args, stream);
}

}  // namespace dashattn::cuda
