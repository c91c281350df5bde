// Stage 1 launcher: picks the (head dim, dtype) instance generated from route_instance.cu.in.
#include "cuda_internal.cuh"
#include "route.cuh"
#include "summarize_chunk.cuh"

namespace dashattn {
namespace cuda {

void launch_route(const RouteParams& p, const ProblemShape& s, cudaStream_t stream, const SummarizeParams* stage0) {
  if (p.summaries.dtype != p.q.dtype) {
    throw Unsupported("cuda", "summaries.dtype",
                      std::string("summaries in ") + dtype_name(p.summaries.dtype) + " with q in " +
                          dtype_name(p.q.dtype) + " (the CUDA backend routes with summaries in the dtype of q)");
  }
  if (p.routing.mask.stride[3] != 1) {
    throw Unsupported("cuda", "routing.mask", "a mask whose word axis is not contiguous");
  }
  // A step's Stage 0 rides in the routing launch where it can (keys in the dtype of q, so that the instance's
  // element type reads them); otherwise it is launched on its own after it, which the caller's guarantee (no
  // query here routes a chunk it writes) allows.
  stage0::SummarizeArgs s0{};
  const bool with_s0 = stage0 != nullptr && stage0->k.dtype == p.q.dtype;
  if (with_s0) s0 = stage0::summarize_args(*stage0);
  bool s0_done = false;
  const bool found = dispatch_instance(s.d, p.q.dtype, [&](auto hdim, auto ctype) {
    s0_done = route_instance<decltype(hdim)::value, decltype(ctype)>(p, s, stream, with_s0 ? &s0 : nullptr);
  });
  if (!found) {
    throw Unsupported("cuda", "q", "head dim " + std::to_string(s.d) + " in " + dtype_name(p.q.dtype) +
                                       " (instantiated head dims: " + instantiated_head_dims() + ")");
  }
  if (stage0 != nullptr && !s0_done) launch_summarize(*stage0, stream);
}

}  // namespace cuda
}  // namespace dashattn
