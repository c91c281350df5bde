// Stage-1 launcher of one (head dim, dtype) instance: the single-sweep kernel (route_fast.cuh) for every block,
// then the multi-pass kernel (route_kernels.cuh) for the blocks whose candidate lists overflowed. Queries or
// summaries whose rows are not 16-byte aligned go to the multi-pass kernel alone. Included only by the generated route_hdim*_*.cu.
#pragma once

#include <string>

#include "route_fast.cuh"
#include "route_kernels.cuh"

namespace dashattn {
namespace cuda {

template <int kHeadDim, typename T>
void route_instance(const RouteParams& p, const ProblemShape& s, cudaStream_t stream) {
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
  if (a.summaries_vec16 && q_vec16) {
    // Blocks of one warp's rows (decode) are few and latency-bound: a deeper ring and longer lists. Prefill keeps
    // two tiles in flight and short lists so that three blocks fit on a multiprocessor.
    const bool decode_like = s.n_q * s.group <= C::kMTiles * 16;
    a.stages = decode_like ? kMaxStages : 2;
    a.list_cap = decode_like ? kDecodeListCap : kPrefillListCap;
    const size_t fast_smem = FastSmem<kHeadDim>::bytes(a.stages, a.list_cap);
    DASHATTN_CUDA_CHECK(cudaFuncSetAttribute(route_fast_kernel<kHeadDim, T>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(fast_smem)));
    route_fast_kernel<kHeadDim, T><<<grid, kThreads, fast_smem, stream>>>(a);
    DASHATTN_CUDA_CHECK_LAUNCH();
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
