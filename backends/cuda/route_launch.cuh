// Stage-1 launcher of one (head dim, dtype) instance: for decode shapes on sm_90 the wide kernel (route_wide.cuh)
// or the cluster kernel (route_cluster.cuh), else the single-sweep kernel (route_fast.cuh) for every block (up to
// 1024 chunks a block whose lists overflow routes itself with the multi-pass code, beyond it hands itself over);
// then the multi-pass kernel
// (route_kernels.cuh) for the blocks handed over, when any can be. Queries or summaries whose rows are not
// 16-byte aligned go to the multi-pass kernel alone. Included only by the generated route_hdim*_*.cu.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "attend_launch.cuh"  // make_kv_tensor_map
#include "route_cluster.cuh"
#include "route_fast.cuh"
#include "route_kernels.cuh"
#include "route_wide.cuh"

namespace dashattn {
namespace cuda {
namespace route_detail {

// Whether the current device runs the cluster kernel of this instance: sm_90 or later, and the loaded image holds
// that kernel's sm_90 code (a build for sm_80 alone runs its sm_80 code there, which has no clusters). Asked once
// per device; no synchronization, so it is safe during graph capture.
template <int kHeadDim, typename T>
bool cluster_route_available() {
  static std::atomic<int> known[64];  // 0 unknown, 1 no, 2 yes
  int dev = 0;
  DASHATTN_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return false;
  int v = known[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0;
    DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaFuncAttributes fa{};
    DASHATTN_CUDA_CHECK(cudaFuncGetAttributes(&fa, route_cluster_kernel<kHeadDim, T>));
    v = (major >= 9 && fa.binaryVersion >= 90) ? 2 : 1;
    known[dev].store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

// CTAs per cluster of the cluster kernel for a launch whose longest sequence has max_chunks chunks (also the number
// of μ's partial sums in both decode routing kernels). DASHATTN_CUDA_DECODE_CLUSTER_CTAS=S (1 to 8) caps it at S,
// for measurements.
inline int64_t cluster_ctas(int64_t max_chunks) {
  static const int cap = [] {
    const char* env = std::getenv("DASHATTN_CUDA_DECODE_CLUSTER_CTAS");
    const int v = env != nullptr ? std::atoi(env) : 0;
    return v >= 1 && v <= kClusterMaxCtas ? v : kClusterMaxCtas;
  }();
  return std::min<int64_t>(cap, std::max<int64_t>(1, ceil_div(max_chunks, kClusterTargetChunks)));
}

// Which decode routing kernel a qualifying shape takes. DASHATTN_CUDA_DECODE_ROUTE=wide or =cluster forces one
// (for measurements). By default the wide kernel (one CTA per pair) runs for sequences of up to 512 chunks once
// there are 8 pairs, and for longer ones when the pairs fill a quarter of the GPU's multiprocessors; below that,
// clusters spread the pairs' summaries over more SMs, which pays when each pair has many to load (one SM streams
// them at a fraction of DRAM bandwidth). Stage 1 on an H100 (132 SMs), µs, cluster / wide at 16 / 32 / 48 pairs:
// 16K 16.6 / 14.7, 17.4 / 14.8, 18.1 / 15.2; 32K 17.3 / 16.8, 18.8 / 17.4, 19.7 / 17.9; 64K 19.0 / 20.9,
// 21.3 / 21.5, 23.7 / 21.9 (perf-log.md, twentieth pass).
enum class DecodeRouteChoice { kAuto, kWide, kCluster };
inline DecodeRouteChoice decode_route_choice() {
  static const DecodeRouteChoice choice = [] {
    const char* env = std::getenv("DASHATTN_CUDA_DECODE_ROUTE");
    if (env != nullptr && std::strcmp(env, "wide") == 0) return DecodeRouteChoice::kWide;
    if (env != nullptr && std::strcmp(env, "cluster") == 0) return DecodeRouteChoice::kCluster;
    return DecodeRouteChoice::kAuto;
  }();
  return choice;
}

// Decode routing by the wide kernel (route_wide.cuh): returns false (nothing launched) when the shape does not
// qualify or the cluster kernel is the better choice. It routes every (sequence, KV head) itself: every row's
// candidates fit its list (per_cap entries), and no sequence is longer than the launch is sized for, since
// per-sequence lengths are at most the padded lengths (or a packed batch's max_seqlen_q / max_seqlen_k), which
// Stage 2's shared memory relies on as well. Lengths that broke that contract could only come in device memory,
// past validation; the kernel then marks the pair (decode_pair's `fits`) and leaves it, writing nothing past its
// shared memory. So no multi-pass launch follows, with or without lengths: with per-sequence lengths, as a ragged
// decode step passes them, that empty check launch had cost 2.1-2.4 µs of Stage 1 at b = 24 (forty-fifth pass).
template <int kHeadDim, typename T>
bool launch_wide_route(const RouteArgs& a, const ProblemShape& s, cudaStream_t stream) {
  if constexpr (kHeadDim > 128 || kHeadDim % 64 != 0) {
    return false;
  } else {
    const int64_t rows = s.n_q * s.group;
    if (rows < 1 || rows > kWideMaxRows || s.max_chunks < 1) return false;
    const int64_t per_cap = ceil_div(s.max_chunks, 32) * 32;
    if (per_cap > kWideMaxChunks) return false;
    const DecodeRouteChoice choice = decode_route_choice();
    if (choice == DecodeRouteChoice::kCluster) return false;
    int device = 0, sms = 0, optin = 0;
    DASHATTN_CUDA_CHECK(cudaGetDevice(&device));
    DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    DASHATTN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const int64_t pairs = s.batch * s.h_kv;
    if (choice == DecodeRouteChoice::kAuto && !(s.max_chunks <= 512 ? pairs >= 8 : pairs * 4 >= sms)) return false;
    const WideArgs wa{static_cast<int>(per_cap), static_cast<int>(rows), static_cast<int>(s.n_q),
                      static_cast<int>(cluster_ctas(s.max_chunks))};
    const size_t smem = WideSmem<kHeadDim>::bytes(wa);
    if (smem + 8 * 1024 > static_cast<size_t>(optin)) return false;  // room for the static arrays
    // The wide kernel sits in the same image as the cluster kernel, so the same check tells that its sm_90 code
    // (bulk copies) is there.
    if (!cluster_route_available<kHeadDim, T>()) return false;
    // The summaries' tensor map: the layout of a K cache ([b, chunks, h_kv, d]), so the same encoding.
    CUtensorMap tmap{};
    const DType dtype = std::is_same_v<T, __nv_bfloat16> ? DType::kBF16 : DType::kF16;
    if (!make_kv_tensor_map(a.summaries, dtype, kHeadDim, &tmap)) return false;
    const auto kernel = route_wide_kernel<kHeadDim, T>;
    DASHATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const dim3 grid(1u, static_cast<unsigned>(s.h_kv), static_cast<unsigned>(s.batch));
    kernel<<<grid, kWideThreads, smem, stream>>>(a, wa, tmap);
    DASHATTN_CUDA_CHECK_LAUNCH();
    return true;
  }
}

// Decode routing over thread-block clusters when every query row of a (sequence, KV head) fits one CTA's MMA
// tiles: returns false (nothing launched) when the shape does not qualify. *may_hand_over tells whether the
// kernel can leave any (sequence, KV head) to the multi-pass kernel. It cannot when the solving CTA holds every
// chunk of a row (whole rows, or a gather buffer that large: no candidate overflow): the multi-pass launch, which
// would only find no mark, is then skipped.
template <int kHeadDim, typename T>
bool launch_cluster_route(const RouteArgs& a, const ProblemShape& s, cudaStream_t stream, bool* may_hand_over) {
  using C = Config<kHeadDim>;
  constexpr int kMaxRows = (kClusterMaxRows / 16 < C::kMTiles ? kClusterMaxRows / 16 : C::kMTiles) * 16;
  const int64_t rows = s.n_q * s.group;
  if (rows < 1 || rows > kMaxRows || s.max_chunks < 1) return false;
  ClusterArgs ca{};
  const int64_t ctas = cluster_ctas(s.max_chunks);
  ca.ctas = static_cast<int>(ctas);
  const int64_t per_cap = ceil_div(ceil_div(s.max_chunks, 32), ctas) * 32;
  if (per_cap > 65535) return false;
  ca.per_cap = static_cast<int>(per_cap);
  ca.rows_alloc = static_cast<int>(rows);
  ca.tokens_alloc = static_cast<int>(s.n_q);
  const int64_t solved_rows = ceil_div(rows, ctas);
  ca.gather_cap = static_cast<int>(ClusterSmem<kHeadDim>::kStageBytes / 4 / static_cast<size_t>(solved_rows));
  const size_t smem = ClusterSmem<kHeadDim>::bytes(ca);
  if (smem > 200 * 1024 || !cluster_route_available<kHeadDim, T>()) return false;
  DASHATTN_CUDA_CHECK(cudaFuncSetAttribute(route_cluster_kernel<kHeadDim, T>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(s.h_kv), static_cast<unsigned>(s.batch));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(ctas);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  DASHATTN_CUDA_CHECK(cudaLaunchKernelEx(&cfg, route_cluster_kernel<kHeadDim, T>, a, ca));
  DASHATTN_CUDA_CHECK_LAUNCH();
  // Lengths in device memory do not count (launch_wide_route says why): only a candidate overflow hands over.
  *may_hand_over = !(ClusterSmem<kHeadDim>::whole_rows(ca) || int64_t(ca.gather_cap) >= per_cap * ctas);
  return true;
}

}  // namespace route_detail

template <int kHeadDim, typename T>
void route_instance(const RouteParams& p, const ProblemShape& s, cudaStream_t stream, const BiasLists* lists) {
  using namespace route_detail;
  using C = Config<kHeadDim>;
  static_assert(kHeadDim % 16 == 0, "head dims are multiples of 16");
  if (s.group > C::kRows) {
    throw Unsupported("cuda", "q", "GQA group size " + std::to_string(s.group) + " above " +
                                       std::to_string(C::kRows) + " at head dim " + std::to_string(kHeadDim));
  }
  RouteArgs a{};
  a.q = device_tensor(p.q);
  a.summaries = device_tensor(p.summaries);
  a.mask = device_tensor(p.routing.mask);
  a.tau = device_tensor(p.routing.tau);
  a.mu = device_tensor(p.routing.mu);
  a.active = device_tensor(p.routing.active_chunks);
  a.lists = bias_lists_for(lists, a.mu, p.method.prior);
  a.batch = device_batch(p.batch, s.n_q, s.n_k);
  a.mask_words = p.routing.mask.shape[3];
  a.chunk = static_cast<int>(s.chunk);
  a.group = static_cast<int>(s.group);
  a.tokens_per_block = static_cast<int>(C::kRows / s.group);
  a.x_scale = route_x_scale(p.method.alpha, p.method.gamma, s.d);
  a.alpha = p.method.alpha;
  a.solver = p.method.solver;
  const auto addr = reinterpret_cast<uintptr_t>(p.summaries.data);
  a.summaries_vec16 = addr % 16 == 0 && p.summaries.stride[0] % 8 == 0 && p.summaries.stride[1] % 8 == 0 &&
                      p.summaries.stride[2] % 8 == 0;
  const int64_t blocks_x = ceil_div(s.n_q, a.tokens_per_block);
  if (blocks_x == 0 || s.batch == 0) return;
  if (s.h_kv > kMaxGridYZ || s.batch > kMaxGridYZ) {
    throw Unsupported("cuda", "q", "more than 65535 KV heads or sequences in one call");
  }
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(s.h_kv), static_cast<unsigned>(s.batch));
  // Cheap and free of synchronization (allowed during graph capture), so set on every launch.
  const auto q_addr = reinterpret_cast<uintptr_t>(p.q.data);
  const bool q_vec16 =
      q_addr % 16 == 0 && p.q.stride[0] % 8 == 0 && p.q.stride[1] % 8 == 0 && p.q.stride[2] % 8 == 0;
  bool may_hand_over = true;
  if (a.summaries_vec16 && q_vec16 && launch_wide_route<kHeadDim, T>(a, s, stream)) return;  // decode, every pair
  if (a.summaries_vec16 && q_vec16 && launch_cluster_route<kHeadDim, T>(a, s, stream, &may_hand_over)) {
    // Decode: the cluster kernel did every (sequence, KV head) except those it marked for the multi-pass kernel.
    if (!may_hand_over) return;
    a.only_flagged = true;
  } else if (a.summaries_vec16 && q_vec16 && a.x_scale > 0.0f) {
    // Blocks of one warp's rows (decode) are few and latency-bound: a deeper ring and longer lists. Prefill keeps
    // two tiles in flight and short lists so that three blocks fit on a multiprocessor (a third stage at two
    // blocks per multiprocessor was slower: perf-log.md, ninth pass). (Its maxima are taken on the unscaled dot
    // products, which needs x_scale > 0, i.e. γ > 0; other γ take the multi-pass kernel.)
    const bool decode_like = s.n_q * s.group <= C::kMTiles * 16;
    a.stages = decode_like ? kMaxStages : 2;
    a.list_cap = decode_like ? kDecodeListCap : kPrefillListCap;
    // Sequences of up to 1024 chunks (64K tokens at C = 64): an overflowing block routes itself and there is no
    // second launch (Stage 0+1 at 32K / 64K 2 % / 1-2 % faster). Longer ones keep the instance without that path
    // and the multi-pass kernel's launch for the blocks they hand over: at 128K / 256K the in-place instance's
    // sweep was 0.5-0.9 % / 0.3-0.7 % slower, and at 1M, where blocks overflow in numbers, the multi-pass code
    // under the sweep's register bound took the prefill from 6.19 to 6.35 s (perf-log.md, seventeenth pass).
    // (The instance encodes the choice: no block of such a sequence has more chunks than max_chunks.)
    constexpr int64_t kInPlaceMaxChunks = 1024;
    const bool in_place = s.max_chunks <= kInPlaceMaxChunks;
    const size_t fast_smem = FastSmem<kHeadDim>::bytes(a.stages, a.list_cap, in_place);
    const auto kernel = in_place ? route_fast_kernel<kHeadDim, T, true> : route_fast_kernel<kHeadDim, T, false>;
    DASHATTN_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(fast_smem)));
    kernel<<<grid, kThreads, fast_smem, stream>>>(a);
    DASHATTN_CUDA_CHECK_LAUNCH();
    if (in_place) return;
    a.only_flagged = true;
  }
  const size_t smem = Smem<kHeadDim>::kBytes;
  DASHATTN_CUDA_CHECK(cudaFuncSetAttribute(route_kernel<kHeadDim, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem)));
  route_kernel<kHeadDim, T><<<grid, kThreads, smem, stream>>>(a);
  DASHATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace dashattn
