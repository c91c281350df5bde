// String names of the enums, shared by the CLI, bindings and error messages.
#include <cstring>
#include <string>

#include "dashattn/dtype.h"
#include "dashattn/prior.h"
#include "dashattn/tensor.h"

namespace dashattn {

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kU32: return "u32";
    case DType::kU8: return "u8";
  }
  return "?";
}

bool parse_dtype(const std::string& name, DType* out) noexcept {
  struct Alias { const char* name; DType t; };
  static const Alias kAliases[] = {
      {"f32", DType::kF32},   {"float32", DType::kF32},   {"fp32", DType::kF32},  {"float", DType::kF32},
      {"f16", DType::kF16},   {"float16", DType::kF16},   {"fp16", DType::kF16},  {"half", DType::kF16},
      {"bf16", DType::kBF16}, {"bfloat16", DType::kBF16},
      {"f64", DType::kF64},   {"float64", DType::kF64},   {"double", DType::kF64},
      {"i32", DType::kI32},   {"int32", DType::kI32},     {"u32", DType::kU32},   {"uint32", DType::kU32},
      {"u8", DType::kU8},     {"uint8", DType::kU8}};
  for (const Alias& a : kAliases) {
    if (name == a.name) {
      *out = a.t;
      return true;
    }
  }
  return false;
}

const char* device_type_name(DeviceType t) noexcept {
  switch (t) {
    case DeviceType::kCpu: return "cpu";
    case DeviceType::kCuda: return "cuda";
    case DeviceType::kHip: return "hip";
  }
  return "?";
}

const char* prior_mode_name(PriorMode m) noexcept {
  switch (m) {
    case PriorMode::kEstimateDiagonal: return "estimate_diagonal";
    case PriorMode::kRaw: return "raw";
    case PriorMode::kNone: return "none";
  }
  return "?";
}

bool parse_prior_mode(const char* name, PriorMode* out) noexcept {
  if (std::strcmp(name, "estimate_diagonal") == 0) *out = PriorMode::kEstimateDiagonal;
  else if (std::strcmp(name, "raw") == 0) *out = PriorMode::kRaw;
  else if (std::strcmp(name, "none") == 0) *out = PriorMode::kNone;
  else return false;
  return true;
}

}  // namespace dashattn
