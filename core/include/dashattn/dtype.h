// Element types and the scalar conversions every backend agrees on.
//
// The conversions are plain bit manipulation (round-to-nearest-even), usable from host code and, through
// DASHATTN_HD, from device code, so that the CPU backend and the reference round bf16/f16 exactly as the GPU does.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define DASHATTN_HD __host__ __device__ __forceinline__
#else
#define DASHATTN_HD inline
#endif

namespace dashattn {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI32, kU32, kU8 };

constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kU8: return 1;
    default: return 4;
  }
}

const char* dtype_name(DType t) noexcept;       // "f32", "f16", "bf16", "f64", "i32", "u32", "u8"
bool parse_dtype(const std::string& name, DType* out) noexcept;  // accepts the names above and "float32", "bfloat16", ...

constexpr bool is_attention_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

DASHATTN_HD uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
DASHATTN_HD float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

DASHATTN_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

DASHATTN_HD uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                     // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

DASHATTN_HD float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // Subnormal: value = mant * 2^-24.
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

DASHATTN_HD uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: round abs * 2^24 to an integer, ties to even.
    const float a = bits_float(abs) * 16777216.0f;
    const uint32_t i = static_cast<uint32_t>(a);
    const float frac = a - static_cast<float>(i);
    uint32_t r = i + ((frac > 0.5f || (frac == 0.5f && (i & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t mant = abs & 0x7fffffu;
  uint32_t exp = (abs >> 23) - 112u;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// Loads element i (already offset) of a tensor of dtype t as float.
DASHATTN_HD float load_as_float(const void* base, DType t) {
  switch (t) {
    case DType::kBF16: return bf16_to_float(*static_cast<const uint16_t*>(base));
    case DType::kF16: return f16_to_float(*static_cast<const uint16_t*>(base));
    case DType::kF64: return static_cast<float>(*static_cast<const double*>(base));
    default: return *static_cast<const float*>(base);
  }
}

// Stores v rounded to dtype t.
DASHATTN_HD void store_from_float(void* base, DType t, float v) {
  switch (t) {
    case DType::kBF16: *static_cast<uint16_t*>(base) = float_to_bf16(v); break;
    case DType::kF16: *static_cast<uint16_t*>(base) = float_to_f16(v); break;
    case DType::kF64: *static_cast<double*>(base) = v; break;
    default: *static_cast<float*>(base) = v; break;
  }
}

// Rounds v to the precision of dtype t and back (used to store summaries "rounded to the key dtype").
DASHATTN_HD float round_to_dtype(float v, DType t) {
  switch (t) {
    case DType::kBF16: return bf16_to_float(float_to_bf16(v));
    case DType::kF16: return f16_to_float(float_to_f16(v));
    default: return v;
  }
}

}  // namespace dashattn
