// Stage 1 launcher: picks the (head dim, dtype) instance generated from route_instance.cu.in.
#include "cuda_internal.cuh"
#include "route.cuh"

namespace dashattn {
namespace cuda {

void launch_route(const RouteParams& p, const ProblemShape& s, cudaStream_t stream, const BiasLists* lists) {
  if (p.summaries.dtype != p.q.dtype) {
    throw Unsupported("cuda", "summaries.dtype",
                      std::string("summaries in ") + dtype_name(p.summaries.dtype) + " with q in " +
                          dtype_name(p.q.dtype) + " (the CUDA backend routes with summaries in the dtype of q)");
  }
  if (p.routing.mask.stride[3] != 1) {
    throw Unsupported("cuda", "routing.mask", "a mask whose word axis is not contiguous");
  }
  const bool found = dispatch_instance(s.d, p.q.dtype, [&](auto hdim, auto ctype) {
    route_instance<decltype(hdim)::value, decltype(ctype)>(p, s, stream, lists);
  });
  if (!found) {
    throw Unsupported("cuda", "q", "head dim " + std::to_string(s.d) + " in " + dtype_name(p.q.dtype) +
                                       " (instantiated head dims: " + instantiated_head_dims() + ")");
  }
}

}  // namespace cuda
}  // namespace dashattn
