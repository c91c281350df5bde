// Non-owning tensor views: a pointer, a dtype, a device and up to four dimensions with element strides.
//
// Attention tensors are always described in the logical order [b, n, h, d]; a [b, h, n, d] buffer is the same
// view with permuted strides (see from_bhnd). Kernels only ever read strides, so any layout whose innermost
// (d) stride is 1 works without a copy; backends may reject other inner strides with a typed error.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "dashattn/dtype.h"

namespace dashattn {

enum class DeviceType : uint8_t { kCpu, kCuda, kHip };

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

const char* device_type_name(DeviceType t) noexcept;  // "cpu", "cuda", "hip"

constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device{};
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> stride{};  // in elements, not bytes

  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  bool is_contiguous() const;
  // Element offset of index (i0, i1, i2, i3) (unused trailing indices are 0).
  int64_t offset(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
  }
  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  std::string shape_string() const;  // "[2, 128, 16, 64]"
};

// A row-major (contiguous) view of the given shape.
TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = {});

// Describes a contiguous [b, h, n, d] buffer as the logical [b, n, h, d] view the API expects.
TensorView from_bhnd(void* data, DType dtype, int64_t b, int64_t h, int64_t n, int64_t d, Device device = {});

}  // namespace dashattn
