// Host side of Stage 2: AttendParams -> AttendArgs, the tiling / split plan, and dispatch to the instances.
#include "attend_launch.cuh"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace dashattn::cuda {
namespace {

int log2_exact(int64_t v) {
  int l = 0;
  while ((int64_t(1) << l) < v) ++l;
  return l;
}

void fill_common(AttendArgs& a, const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                 const TensorView& lse, const BatchLayout& batch, const ProblemShape& s) {
  a.q = device_tensor(q);
  a.k = device_tensor(k);
  a.v = device_tensor(v);
  a.o = device_tensor(o);
  a.o_dtype = o.dtype;
  a.lse = device_tensor(lse);
  a.batch = device_batch(batch, s.n_q, s.n_k);
  a.pages = key_pages(batch, k);  // kept out of DeviceBatch: the routing kernels' arguments stay as they were
  a.num_seqs = int(s.batch);
  a.h_q = int(s.h_q);
  a.h_kv = int(s.h_kv);
  a.group = int(s.group);
  a.scale_log2 = s.scale * 1.4426950408889634f;
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link against libcuda); null when the driver
// lacks it.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return EncodeTiledFn(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

// A 4-d tensor map of a [b, n, h, d] view of 16-bit elements whose axes, innermost first, are the view's axes
// `axes` (the head dim first), with boxes `box` and the 128-byte swizzle of the Stage-2 kernel's shared layouts.
bool encode_view_map(const DeviceTensor& t, DType dtype, int64_t head_dim, const int (&axes)[4],
                     const cuuint32_t (&box)[4], CUtensorMap* map) {
  const EncodeTiledFn encode = encode_tiled();
  if (encode == nullptr || t.data == nullptr || (dtype != DType::kBF16 && dtype != DType::kF16)) return false;
  if (t.stride[3] != 1 || t.shape[3] != head_dim || reinterpret_cast<uintptr_t>(t.data) % 16 != 0) return false;
  cuuint64_t dims[4];
  for (int i = 0; i < 4; ++i) dims[i] = cuuint64_t(t.shape[axes[i]]);
  cuuint64_t strides[3];
  int64_t packed = head_dim * 2;  // bytes of one row when the axes are packed
  for (int i = 0; i < 3; ++i) {
    if (dims[i + 1] == 0) return false;
    int64_t bytes = t.stride[axes[i + 1]] * 2;
    // A size-1 axis is never stepped over; give it a stride the encoder accepts whatever the view says.
    if (dims[i + 1] == 1 && (bytes <= 0 || bytes % 16 != 0)) bytes = packed;
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t(1) << 40)) return false;
    strides[i] = cuuint64_t(bytes);
    packed = bytes * int64_t(dims[i + 1]);
  }
  const cuuint32_t elem_step[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type =
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, type, 4, t.data, dims, strides, box, elem_step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

bool make_kv_tensor_map(const DeviceTensor& t, DType dtype, int64_t head_dim, CUtensorMap* map) {
  // Axes innermost first: head dim, key rows, KV heads, batch.
  return encode_view_map(t, dtype, head_dim, {3, 1, 2, 0}, {64, 64, 1, 1}, map);
}

bool make_row_tensor_map(const DeviceTensor& t, DType dtype, int64_t head_dim, int box_heads, int box_tokens,
                         CUtensorMap* map) {
  if (box_heads < 1 || box_heads > 256 || box_tokens < 1 || box_tokens > 256) return false;
  // Axes innermost first: head dim, heads, tokens, batch.
  return encode_view_map(t, dtype, head_dim, {3, 2, 1, 0},
                         {64, cuuint32_t(box_heads), cuuint32_t(box_tokens), 1}, map);
}

AttendPlan plan_attend(const ProblemShape& s, int num_sms, bool dense) {
  (void)dense;
  AttendPlan plan;
  const int64_t rows = s.n_q * s.group;  // rows of one (sequence, KV head)
  // d = 128 prefill: 8 consumer warps, which run on wgmma in warpgroups where the CTA's tokens share their tiles
  // (devices without wgmma get the 7-warp tiling, see run_attend).
  plan.warps = rows <= 16 ? 1 : (rows <= 64 || s.d > 128 ? 4 : (s.d == 128 ? 8 : 7));
  const int64_t m_blocks = ceil_div(rows, 16 * plan.warps);
  const int64_t ctas = m_blocks * s.batch * s.h_kv;
  // Decode CTAs (one 16-row slab, tile split over 4 warps) fit up to two per SM (their ring's shared memory, 228 KB
  // per SM on sm_90, and the registers the launch bounds leave them); wide ones one.
  const int64_t per_sm =
      plan.warps == 1
          ? std::min<int64_t>(2, std::max<int64_t>(1, int64_t(228 * 1024) / int64_t(decode_smem_bytes(int(s.d)))))
          : 1;
  const int64_t resident = int64_t(num_sms) * per_sm;
  const int64_t tiles = ceil_div(std::max<int64_t>(s.n_k, 1), 64);
  if (ctas < resident && tiles >= 4) {
    // Split the key axis so one wave fills the GPU; each split gets an equal share of the *active* tiles on the
    // device, so fewer than two tiles of the full length per split would only add combine traffic.
    int64_t splits = resident / ctas;
    splits = std::min<int64_t>(splits, tiles / 2);
    splits = std::min<int64_t>(splits, 64);
    plan.num_splits = int(std::max<int64_t>(splits, 1));
  }
  plan.workspace_bytes = split_workspace_bytes(s, plan.num_splits);
  return plan;
}

int current_sm_count() {
  int device = 0, sms = 0;
  DASHATTN_CUDA_CHECK(cudaGetDevice(&device));
  DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

size_t split_workspace_bytes(const ProblemShape& s, int num_splits) {
  if (num_splits <= 1) return 0;
  const int64_t part_rows = s.batch * s.h_q * s.n_q;
  return size_t(num_splits) * size_t(part_rows) * size_t(s.d + 1) * sizeof(float) + 256;
}

size_t attend_workspace_bytes(const ProblemShape& s, bool dense) {
  return plan_attend(s, current_sm_count(), dense).workspace_bytes;
}

AttendArgs make_attend_args(const AttendParams& p, const ProblemShape& s) {
  AttendArgs a;
  fill_common(a, p.q, p.k, p.v, p.o, p.lse, p.batch, s);
  a.mask = device_tensor(p.routing.mask);
  a.mask_words = int(s.mask_words);
  a.chunk = int(s.chunk);
  a.log2_chunk = log2_exact(s.chunk);
  a.prior = p.method.prior;
  a.alpha = p.method.alpha;
  a.gamma = p.method.gamma;
  a.inv_sigma = 1.0f / p.method.sigma;
  if (a.prior != PriorMode::kNone) {
    a.summaries = device_tensor(p.summaries);
    a.tau = device_tensor(p.routing.tau);
    a.mu = device_tensor(p.routing.mu);
  }
  a.dense = false;
  return a;
}

AttendArgs make_dense_args(const DenseParams& p, const ProblemShape& s) {
  AttendArgs a;
  fill_common(a, p.q, p.k, p.v, p.o, p.lse, p.batch, s);
  a.chunk = 64;
  a.log2_chunk = 6;
  a.prior = PriorMode::kNone;
  a.dense = true;
  return a;
}

void launch_attend_planned(AttendArgs args, int64_t head_dim, DType dtype, const AttendPlan& plan, void* workspace,
                           cudaStream_t stream) {
  args.num_splits = plan.num_splits;
  // A persistent launch's workspace holds its item counter (none: a fixed order of items).
  if (plan.persistent && plan.num_splits == 1 && workspace != nullptr)
    args.item_counter = static_cast<unsigned long long*>(workspace);
  if (plan.num_splits > 1) {
    const size_t part_rows = size_t(args.num_seqs) * args.h_q * size_t(args.batch.padded_n_q);
    char* base = static_cast<char*>(workspace);
    args.part_o = reinterpret_cast<float*>(base);
    const size_t o_bytes = size_t(plan.num_splits) * part_rows * size_t(head_dim) * sizeof(float);
    args.part_lse = reinterpret_cast<float*>(base + ((o_bytes + 255) / 256) * 256);
  }
  const bool ok = dispatch_instance(head_dim, dtype, [&](auto hdim, auto element) {
    run_attend<decltype(hdim)::value, decltype(element)>(args, plan, stream);
  });
  if (!ok) {
    throw Unsupported("cuda", "q", "head dim " + std::to_string(head_dim) + " with dtype " + dtype_name(dtype) +
                                       " (compiled head dims: " + instantiated_head_dims() + ")");
  }
}

// DASHATTN_CUDA_ATTEND_PERSISTENT=1 runs every Stage-2 launch that the d = 128 warpgroup tiling takes without a key
// split through its persistent form (one CTA per SM, items in the fixed order, since the launch has no workspace of
// its own for the item counter), so that the two can be compared in one binary; measurements only.
namespace {
// Whether the environment variable `name` is set to `value` (the measurement switches below).
bool env_is(const char* name, const char* value) {
  const char* env = std::getenv(name);
  return env != nullptr && std::strcmp(env, value) == 0;
}

bool persistent_attend_forced() {
  static const bool forced = env_is("DASHATTN_CUDA_ATTEND_PERSISTENT", "1");
  return forced;
}
}  // namespace

// DASHATTN_CUDA_ROW_TMA=0 keeps Q's copy and o's stores on the threads (cp.async, 16-byte stores) where the tensor
// copies would apply, so that the two can be compared in one binary; measurements only.
bool row_tensor_copies_allowed() {
  static const bool allowed = !env_is("DASHATTN_CUDA_ROW_TMA", "0");
  return allowed;
}

void launch_attend(const AttendParams& p, const ProblemShape& s, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream, const BiasLists* lists) {
  AttendPlan plan = plan_attend(s, current_sm_count(), false);
  if (plan.num_splits > 1 && (workspace == nullptr || workspace_bytes < plan.workspace_bytes)) plan.num_splits = 1;
  // (The caller's workspace is not sized for an item counter: the forced persistent kernel takes none.)
  plan.persistent = plan.num_splits == 1 && plan.warps == 8 && persistent_attend_forced();
  AttendArgs args = make_attend_args(p, s);
  args.lists = bias_lists_for(lists, args.mu, args.prior);
  launch_attend_planned(args, s.d, p.q.dtype, plan, plan.persistent ? nullptr : workspace, stream);
}

void launch_attend(const AttendParams& p, const ProblemShape& s, cudaStream_t stream) {
  launch_attend(p, s, nullptr, 0, stream);
}

}  // namespace dashattn::cuda
