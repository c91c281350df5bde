// Stage 0 on the GPU: one CTA per (chunk, KV head, sequence) runs summarize_chunk (summarize_chunk.cuh), which
// fixes the summary's arithmetic and its reduction orders.
#include "cuda_internal.cuh"
#include "summarize_chunk.cuh"

namespace dashattn {
namespace cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(stage0::kThreads) summarize_kernel(stage0::SummarizeArgs a) {
  extern __shared__ uint4 smem_raw[];
  stage0::summarize_chunk<T>(a, a.first_chunk + blockIdx.x, static_cast<int>(blockIdx.y), blockIdx.z,
                             reinterpret_cast<unsigned char*>(smem_raw));
}

}  // namespace

void launch_summarize(const SummarizeParams& p, cudaStream_t stream) {
  const stage0::SummarizeArgs a = stage0::summarize_args(p);
  if (a.todo <= 0) return;
  const size_t smem = stage0::scratch_bytes(a.chunk, a.d);  // up to 65 KB (C = 128, d = 256)
  const dim3 grid(static_cast<unsigned>(a.todo), static_cast<unsigned>(a.h_kv), static_cast<unsigned>(a.batch_count));
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024)
      DASHATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    kernel<<<grid, stage0::kThreads, smem, stream>>>(a);
  };
  switch (p.k.dtype) {
    case DType::kBF16: launch(summarize_kernel<__nv_bfloat16>); break;
    case DType::kF16: launch(summarize_kernel<__half>); break;
    default: throw Unsupported("cuda", "k.dtype", std::string("Stage 0 on ") + dtype_name(p.k.dtype));
  }
  DASHATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace dashattn
