// Stage 2 (sparse attention, prefill and decode) and the dense causal baseline: host-side planning and launch.
//
// Entry points for the backend front end:
//   launch_attend(p, s, stream)                      cuda_internal.cuh's interface; never splits KV
//   launch_attend(p, s, workspace, bytes, stream)    splits KV when the shape under-fills the GPU (decode) and
//                                                    `bytes` >= attend_workspace_bytes(s); otherwise as above
//   launch_dense(p, s, stream) / (p, s, workspace, bytes, stream)   the same kernel with every visible key
// The plan depends on the shape and the device only (never on routing results), so the workspace size is known
// before the call and a decode step can be captured in a CUDA graph.
//
// Instances: attend_instance.cu.in is configured once per (head dim, dtype) pair (see cuda_internal.cuh); each
// generated file explicitly instantiates run_attend<HDIM, CTYPE>, which holds every tiling of that pair
// (the decode tile split, 4, 7, 8 warps) and the split-combine kernel. Nothing else instantiates the kernels.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "attend_args.cuh"

namespace dashattn::cuda {

// Workspace of a persistent launch (AttendPlan::persistent): its item counter (AttendArgs::item_counter).
constexpr size_t kItemCounterBytes = 256;

// K/V ring depth of the decode tiling (one 16-row slab per CTA): 75 / 110 / 144 KB of shared memory for head dim 64 / 128 / 256,
// i.e. 3 / 2 / 1 CTAs per SM, each keeping its next tiles in flight.
constexpr int decode_stages(int head_dim) { return head_dim <= 64 ? 4 : (head_dim <= 128 ? 3 : 2); }
constexpr size_t decode_smem_bytes(int head_dim) {
  // Q, the K/V ring, the per-stage bias tables and k̄ buffers, barriers and base alignment (attend_kernel.cuh's
  // AttendConfig), and the per-CTA bias table (at most 4 KB for this tiling).
  return size_t(16) * head_dim * 2 +
         size_t(decode_stages(head_dim)) * (2 * 64 * head_dim * 2 + 16 * 4 * 4 + 4 * (head_dim + 8) * 2) + 512 + 2048 +
         4096;
}

struct AttendPlan {
  int warps = 7;           // consumer warps per CTA (1, 4, 7 or 8); a CTA covers 16 * warps (token, head) rows
  int num_splits = 1;      // > 1: split-KV with fp32 partials in the workspace and a combine kernel
  size_t workspace_bytes = 0;
  bool tma = true;         // sm_90: load whole K/V tiles with tensor copies when the tensors allow it
  int stages = 0;          // K/V ring depth of the wide tilings: 0 = the deepest that fits the device, or 3 / 4
  bool bias_table = true;  // consumer-computed prior bias: per-CTA table before the main loop where it fits
  // The d = 128 warpgroup tiling without a key split as a persistent kernel (attend_kernel.cuh), with
  // persistent_ctas CTAs (0: one per SM; tests use a few, so that every CTA walks many items). Off by default: it
  // is correct (bitwise the one-item-per-CTA kernel's output) but 4-11 % slower on an H100 (perf-log.md, twelfth,
  // twenty-fifth and thirty-fourth passes). Only
  // launch_attend_planned takes it; a workspace of kItemCounterBytes gives its CTAs an item counter, none a fixed
  // order of items.
  bool persistent = false;
  int persistent_ctas = 0;
};

// Tensor map of a [b, n, h, d] K or V view (16-bit elements) whose boxes are 64 keys x 64 columns with the
// 128-byte swizzle the Stage-2 kernel reads. False when the driver, the device or the view's alignment and
// strides rule it out (the kernel then copies with cp.async).
bool make_kv_tensor_map(const DeviceTensor& t, DType dtype, int64_t head_dim, CUtensorMap* map);
// Tensor map of a [b, n, h, d] Q or O view (16-bit elements) whose boxes are box_tokens tokens x box_heads heads x
// 64 columns, laid out as the Stage-2 kernel's Q buffer (rows token-major, the same 128-byte swizzle). False as
// for make_kv_tensor_map (the kernel then copies Q with cp.async and stores o from its lanes).
bool make_row_tensor_map(const DeviceTensor& t, DType dtype, int64_t head_dim, int box_heads, int box_tokens,
                         CUtensorMap* map);
// False when DASHATTN_CUDA_ROW_TMA=0 (then no launch takes Q or o through make_row_tensor_map's maps).
bool row_tensor_copies_allowed();

// Multiprocessors of the current device (what the launchers plan for).
int current_sm_count();
// The plan for a shape on a device with num_sms multiprocessors (dense: every visible key attended).
AttendPlan plan_attend(const ProblemShape& s, int num_sms, bool dense);
// Workspace of a key split into num_splits parts: fp32 partial o and lse per split and row (0 for one part).
size_t split_workspace_bytes(const ProblemShape& s, int num_splits);
// Workspace that launch_attend / launch_dense may use on the current device (0 when no split pays).
size_t attend_workspace_bytes(const ProblemShape& s, bool dense = false);

// lists: Stage 1's bias lists of this forward() (bias_lists.cuh), or null.
void launch_attend(const AttendParams& p, const ProblemShape& s, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream, const BiasLists* lists = nullptr);
void launch_dense(const DenseParams& p, const ProblemShape& s, void* workspace, size_t workspace_bytes,
                  cudaStream_t stream);

// Lower level, for tests and benchmarks that choose the tiling themselves.
AttendArgs make_attend_args(const AttendParams& p, const ProblemShape& s);
AttendArgs make_dense_args(const DenseParams& p, const ProblemShape& s);
// Runs args with plan; the workspace must hold plan.workspace_bytes when plan.num_splits > 1 (a persistent plan:
// kItemCounterBytes, or null).
void launch_attend_planned(AttendArgs args, int64_t head_dim, DType dtype, const AttendPlan& plan, void* workspace,
                           cudaStream_t stream);

// One (head dim, element type) instance; defined in attend_run.cuh, instantiated by the generated files.
template <int kHeadDim, typename Element>
void run_attend(const AttendArgs& args, const AttendPlan& plan, cudaStream_t stream);

}  // namespace dashattn::cuda
