// Helpers of the CUDA tests: device copies of reference problems through the backend's own memory API, and
// host copies of device outputs.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "dashattn/dashattn.h"
#include "reference/reference.h"

namespace dashattn::cuda_test {

Backend& cuda_backend();

// A padded problem of b sequences (n_q queries and n_k keys each, before any per-sequence lengths).
ref::ProblemSpec spec(int64_t b, int64_t n_q, int64_t n_k, int64_t h_q, int64_t h_kv, int64_t d, DType dt,
                      double q_std, uint64_t seed);
// Whether head dim d is compiled into the backend (DASHATTN_HEAD_DIMS).
bool compiled(int64_t d);

// A device buffer owned by the test (freed through the backend).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Device copy of a host tensor: same shape, strides and dtype.
struct DeviceTensor {
  DeviceBuffer buffer;
  TensorView view;
};
DeviceTensor to_device(const TensorView& host);
// Device tensor of the given contiguous shape, filled with a byte pattern (0xFF poisons: NaN floats, all-ones
// mask words) so that unwritten outputs show.
DeviceTensor device_filled(DType dtype, std::vector<int64_t> shape, unsigned char byte);

// Device copy of a problem's inputs and batch arrays.
struct DeviceProblem {
  DeviceTensor q, k, v, summary_query;
  DeviceBuffer cu_q, cu_k, seqlens_q, seqlens_k;
  BatchLayout batch;
};
DeviceProblem to_device(const ref::Problem& pr);

template <typename T>
std::vector<T> to_host(const TensorView& dev) {
  std::vector<T> out(static_cast<size_t>(dev.numel()));
  // Views made here are contiguous; copy the whole span.
  cuda_backend().copy(out.data(), dev.data, out.size() * sizeof(T), CopyKind::kDeviceToHost, nullptr);
  cuda_backend().synchronize(nullptr);
  return out;
}

// Host copy of a device tensor of a 16-bit dtype as doubles (contiguous views only).
std::vector<double> to_host_double(const TensorView& dev);

}  // namespace dashattn::cuda_test
