// Tensor-core and async-copy primitives of the Stage-2 kernels (sm_80 and later, also used on sm_90a).
//
// Thin wrappers over mma.sync m16n8k16, ldmatrix and cp.async so the attention kernels read as tile algebra.
// Fragment layouts are those of mma_sm80.cuh (PTX ISA, "Matrix Fragments for mma.m16n8k16"); the C layout of two
// adjacent n-tiles equals the A layout of one k-step, which lets P stay in registers between the two GEMMs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace dashattn::cuda::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes < 16 zero-fills the rest (0 reads nothing: rows past the end).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes));
}
// 4 bytes (one count or index) by cp.async, so that no register holds it until it is needed.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

// Same, addressed by a shared-memory address (lets the compiler fold constant tile offsets into the instruction).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 2^x on the special-function unit (ex2.approx, flush-to-zero); 2^-inf = +0, as the masked logits need.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// mbarriers (sm_80+): per-stage "full" (the producer's cp.async copies landed) and "empty" (every consumer warp
// is done with the stage) signals, so warps that skip a tile never wait for warps that compute it.
__device__ __forceinline__ void mbar_init(uint32_t addr, uint32_t count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t addr) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared.b64 st, [%0];\n}\n" ::"r"(addr) : "memory");
}
// Arrives on the barrier once all of this thread's earlier cp.async copies have completed.
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t addr) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(addr) : "memory");
}
// Arrives on the barrier once this thread's earlier cp.async copies have completed, without consuming one of the
// expected arrivals (the pending count is raised first): the phase then also waits for those copies.
__device__ __forceinline__ void cp_async_mbar_arrive_inc(uint32_t addr) {
  asm volatile("cp.async.mbarrier.arrive.shared.b64 [%0];\n" ::"r"(addr) : "memory");
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// sm_90: makes barrier initialisations visible to the asynchronous proxy (the tensor copies that complete on them).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// sm_90: the current phase of the barrier also waits for `bytes` of asynchronous (tensor-copy) transactions.
__device__ __forceinline__ void mbar_expect_tx(uint32_t addr, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(bytes) : "memory");
}
// sm_90: fetches a tensor map (a __grid_constant__ kernel parameter) into the descriptor cache, so that the first
// tensor copy through it does not also wait for the descriptor's own load.
__device__ __forceinline__ void prefetch_tensormap(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tensor_map)) : "memory");
}
// An L2 evict-first cache policy (createpolicy, for a whole access): for data read or written once, so that it does
// not push out of L2 what is read again or soon (a decode step's K/V stream; a prefill CTA's Q rows and o rows,
// beside the K/V tiles that many CTAs read).
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

// sm_90 tensor copy of one box of a 4-d tensor map (coordinates innermost first) into shared memory, completing
// as transactions on the barrier; kEvictFirst: with l2_policy_evict_first.
template <bool kEvictFirst = false>
__device__ __forceinline__ void tma_load_4d(uint32_t smem_dst, const void* tensor_map, uint32_t mbar, int c0, int c1,
                                            int c2, int c3) {
  if constexpr (kEvictFirst) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
        "[%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(smem_dst),
        "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(mbar), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
        "l"(l2_policy_evict_first())
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
        "[%2];\n" ::"r"(smem_dst),
        "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(mbar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
  }
}

// sm_90 tensor store of one box of a 4-d tensor map from shared memory (the bulk-group form: completion is
// tracked per thread by commit / wait groups); kEvictFirst as for tma_load_4d. The writes to the box's shared
// memory must be made visible to the asynchronous proxy first (fence.proxy.async.shared::cta by the writing
// threads, then a barrier).
template <bool kEvictFirst = false>
__device__ __forceinline__ void tma_store_4d(const void* tensor_map, uint32_t smem_src, int c0, int c1, int c2,
                                             int c3) {
  if constexpr (kEvictFirst) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3, %4, %5}], [%1], %6;\n" ::
            "l"(reinterpret_cast<uint64_t>(tensor_map)),
        "r"(smem_src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(l2_policy_evict_first())
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
            reinterpret_cast<uint64_t>(tensor_map)),
        "r"(smem_src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
  }
}
// Commits this thread's tensor stores and waits until their shared memory has been read (the writes to global
// memory complete on their own; the shared memory may then be reused or released).
__device__ __forceinline__ void tma_store_commit_and_wait_read() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
#endif

// Waits until the phase of the given parity has completed. On sm_90 try_wait lets the hardware park the warp for a
// while instead of spinning, so waiting warps do not take issue slots from the warps computing beside them.
__device__ __forceinline__ void mbar_wait(uint32_t addr, uint32_t parity) {
  uint32_t done;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#else
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// D = A * B + D with fp32 accumulation; Element selects the bf16 or f16 instruction.
template <typename Element>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Packs two floats into one A/B fragment register (low half = first element), rounding to nearest even.
template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace dashattn::cuda::mma
