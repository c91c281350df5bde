// Warp-level tensor-core MMA (mma.sync m16n8k16, fp32 accumulators) for bf16 and f16 operands, sm_80 and later.
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

}  // namespace cuda
}  // namespace dashattn
