// Contiguous tensors in a backend's memory, owned for the duration of one command.
//
// The CLI moves host buffers to whatever device the selected backend runs on, so every subcommand works on CPU
// and GPU backends alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dashattn/backend.h"
#include "dashattn/tensor.h"

namespace dashattn::cli {

// A contiguous row-major view of host or device memory.
TensorView contiguous_view(void* data, DType dtype, const std::vector<int64_t>& shape, Device device = {});
int64_t element_count(const std::vector<int64_t>& shape);

class DeviceTensor {
 public:
  DeviceTensor() = default;
  // Zero-initialized.
  DeviceTensor(Backend& backend, DType dtype, std::vector<int64_t> shape);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& other) noexcept;
  DeviceTensor& operator=(DeviceTensor&& other) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  // A copy of host bytes (exactly bytes() of them).
  static DeviceTensor from_host(Backend& backend, DType dtype, std::vector<int64_t> shape, const void* host);

  TensorView view() const;
  size_t bytes() const { return bytes_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  void* data() const { return data_; }

  void upload(const void* host);
  void download(void* host) const;
  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> out(bytes_ / sizeof(T));
    download(out.data());
    return out;
  }
  // The values converted to float (for f32, f16, bf16 tensors).
  std::vector<float> to_host_float() const;

 private:
  void release() noexcept;

  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
};

}  // namespace dashattn::cli
