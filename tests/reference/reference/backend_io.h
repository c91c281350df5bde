// Moving host test tensors to a backend's device and back, so one test body runs every backend alike.
//
// A device tensor is a byte-for-byte copy of a host tensor's storage, with the same strides; for the CPU backend
// the "device" is host memory allocated by the backend itself.
#pragma once

#include <string>
#include <vector>

#include "dashattn/backend.h"
#include "reference/reference.h"

namespace dashattn::ref {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct DeviceTensor {
  DeviceBuffer buffer;
  TensorView view;  // undefined when the host tensor was
};

Device device_of(const Backend& backend);

// Copies the host tensor's storage to the device (an undefined host tensor gives an undefined device tensor).
DeviceTensor upload(Backend& backend, const HostTensor& host);
// Copies the device tensor back into host (same storage size and strides).
void download(Backend& backend, const DeviceTensor& dev, HostTensor& host);
// A device array of int32 values (cu_seqlens, seqlens); empty input gives an empty buffer.
DeviceBuffer upload_ints(Backend& backend, const std::vector<int32_t>& values);

// The problem's inputs and batch layout on a backend's device.
struct DeviceProblem {
  DeviceTensor q, k, v, summary_query;
  DeviceBuffer cu_q, cu_k, seqlens_q, seqlens_k;
  BatchLayout layout;
};
DeviceProblem upload_problem(Backend& backend, const Problem& problem);
// A forward() call's inputs from the uploaded problem: q, k, v, the summary query, the batch layout and the method;
// outputs, routing tensors, stream and workspace are the caller's to set.
ForwardParams forward_inputs(const DeviceProblem& dev, const MethodParams& method);
// The same from a host problem (the CPU backend reads it in place; the batch layout points into it).
ForwardParams forward_inputs(const Problem& problem, const MethodParams& method);

// Available backends, and a line per unavailable one saying why (for the test log).
std::vector<Backend*> available_backends(std::vector<std::string>* unavailable_reasons = nullptr);

}  // namespace dashattn::ref
