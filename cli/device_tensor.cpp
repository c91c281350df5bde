#include "device_tensor.h"

#include <utility>

namespace dashattn::cli {

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

TensorView contiguous_view(void* data, DType dtype, const std::vector<int64_t>& shape, Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.shape[static_cast<size_t>(i)] = shape[static_cast<size_t>(i)];
    v.stride[static_cast<size_t>(i)] = stride;
    stride *= shape[static_cast<size_t>(i)];
  }
  return v;
}

DeviceTensor::DeviceTensor(Backend& backend, DType dtype, std::vector<int64_t> shape)
    : backend_(&backend), dtype_(dtype), shape_(std::move(shape)) {
  bytes_ = static_cast<size_t>(element_count(shape_)) * static_cast<size_t>(dtype_size(dtype_));
  // Never a zero-byte request: a null pointer reads as "undefined" to the library.
  data_ = backend_->allocate(bytes_ > 0 ? bytes_ : 1);
  if (bytes_ > 0) backend_->memset_zero(data_, bytes_, nullptr);
}

DeviceTensor DeviceTensor::from_host(Backend& backend, DType dtype, std::vector<int64_t> shape, const void* host) {
  DeviceTensor t(backend, dtype, std::move(shape));
  t.upload(host);
  return t;
}

DeviceTensor::~DeviceTensor() { release(); }

DeviceTensor::DeviceTensor(DeviceTensor&& other) noexcept { *this = std::move(other); }

DeviceTensor& DeviceTensor::operator=(DeviceTensor&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = std::exchange(other.backend_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    dtype_ = other.dtype_;
    shape_ = std::move(other.shape_);
  }
  return *this;
}

void DeviceTensor::release() noexcept {
  if (backend_ != nullptr && data_ != nullptr) backend_->deallocate(data_);
  data_ = nullptr;
}

TensorView DeviceTensor::view() const {
  return contiguous_view(data_, dtype_, shape_, Device{backend_->device_type(), 0});
}

void DeviceTensor::upload(const void* host) {
  if (bytes_ > 0) backend_->copy(data_, host, bytes_, CopyKind::kHostToDevice, nullptr);
  backend_->synchronize(nullptr);
}

void DeviceTensor::download(void* host) const {
  backend_->synchronize(nullptr);
  if (bytes_ > 0) backend_->copy(host, data_, bytes_, CopyKind::kDeviceToHost, nullptr);
  backend_->synchronize(nullptr);
}

std::vector<float> DeviceTensor::to_host_float() const {
  std::vector<uint8_t> raw(bytes_);
  download(raw.data());
  const size_t n = static_cast<size_t>(element_count(shape_));
  const size_t width = static_cast<size_t>(dtype_size(dtype_));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = load_as_float(raw.data() + i * width, dtype_);
  return out;
}

}  // namespace dashattn::cli
