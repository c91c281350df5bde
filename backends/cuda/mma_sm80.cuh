// Warp-level tensor-core MMA (mma.sync m16n8k16, fp32 accumulators) for bf16 and f16 operands, sm_80 and later,
// plus the ldmatrix and cp.async helpers that feed it from shared memory.
// Fragment layout (PTX ISA, "Matrix fragments for mma.m16n8k16"): with grp = lane / 4 and quad = lane % 4,
//   A (row-major 16x16): a0 = (grp, 2quad..+1), a1 = (grp+8, 2quad..), a2 = (grp, 2quad+8..), a3 = (grp+8, 2quad+8..)
//   B (col-major 16x8):  b0 = (k 2quad..+1, n grp), b1 = (k 2quad+8..+1, n grp)
//   C (16x8 fp32):       c0, c1 = (grp, 2quad, 2quad+1), c2, c3 = (grp+8, 2quad, 2quad+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace dashattn {
namespace cuda {

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                            const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 b16 matrices from shared memory (ldmatrix.x4): lane l gives the row address of matrix l / 8, row l % 8;
// register j receives matrix j in the fragment layout (thread t holds row t / 4, columns 2(t % 4), +1). For a tile
// stored [n][k] (k contiguous), matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) are the
// B fragments b0, b1 of the n8 tiles n 0-7 and n 8-15 of one k16 step.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte asynchronous global-to-shared copy; src_bytes = 0 writes zeros without reading global memory.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, int src_bytes) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `pending` committed groups are still in flight (pending in 0..3).
__device__ __forceinline__ void cp_async_wait(int pending) {
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
  }
}


// Scores of one 16-chunk sub-tile of summaries (shared memory) against kMT 16-row tiles of queries held as A
// fragments: acc[mt][n] covers chunks 8n..8n+7 of the sub-tile. `brow` is this lane's ldmatrix row in the sub-tile.
// Row tiles that hold no live row are skipped (their acc stays 0).
template <typename T, int kMT, int kKS>
__device__ __forceinline__ void score_subtile(float (&acc)[kMT][2][4], const uint32_t (&qf)[kMT][kKS][4],
                                              const bool (&mt_active)[kMT], const uint16_t* brow) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][n][i] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) {
    uint32_t b4[4];
    ldmatrix_x4(b4, brow + ks * 16);
    const uint32_t b0[2] = {b4[0], b4[1]}, b1[2] = {b4[2], b4[3]};
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if (mt_active[mt]) {
        mma_m16n8k16<T>(acc[mt][0], qf[mt][ks], b0);
        mma_m16n8k16<T>(acc[mt][1], qf[mt][ks], b1);
      }
    }
  }
}

}  // namespace cuda

}  // namespace dashattn
