#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "byte_io.h"
#include "dashattn/error.h"
#include "dashattn/io/tensor_file.h"

namespace dashattn::io {

namespace {

uint64_t checked_size(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  int64_t numel = 0;
  uint64_t nbytes = 0;
  if (!detail::checked_numel(shape, &numel) || !detail::checked_nbytes(numel, dtype, &nbytes) ||
      nbytes > static_cast<uint64_t>(PTRDIFF_MAX)) {
    throw InvalidArgument(name, "non-negative dimensions whose byte size fits in memory",
                          "shape " + detail::shape_to_string(shape));
  }
  return nbytes;
}

}  // namespace

Tensor::Tensor(std::string name, DType dtype, std::vector<int64_t> shape)
    : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)) {
  bytes_.assign(checked_size(name_, dtype_, shape_), 0);
}

Tensor::Tensor(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes)
    : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)), bytes_(std::move(bytes)) {
  const uint64_t expected = checked_size(name_, dtype_, shape_);
  if (bytes_.size() != expected) {
    throw InvalidArgument(name_, std::to_string(expected) + " bytes for shape " + detail::shape_to_string(shape_) +
                                     " of " + dtype_name(dtype_),
                          std::to_string(bytes_.size()) + " bytes");
  }
}

Tensor Tensor::from_view(std::string name, const TensorView& view) {
  if (view.device.type != DeviceType::kCpu) {
    throw InvalidArgument(name, "a CPU tensor", std::string(device_type_name(view.device.type)) + " tensor");
  }
  if (view.rank < 0 || view.rank > kMaxRank) {
    throw InvalidArgument(name, "rank 0.." + std::to_string(kMaxRank), "rank " + std::to_string(view.rank));
  }
  std::vector<int64_t> shape(view.shape.begin(), view.shape.begin() + view.rank);
  Tensor t(std::move(name), view.dtype, shape);
  if (t.numel() == 0) return t;
  if (view.data == nullptr) throw InvalidArgument(t.name_, "a view with data", "a null data pointer");

  // Walk the index space in row-major order; four nested loops cover every rank once padded with size-1 dims.
  std::array<int64_t, kMaxRank> dims{1, 1, 1, 1}, strides{0, 0, 0, 0};
  const int pad = kMaxRank - view.rank;
  for (int i = 0; i < view.rank; ++i) {
    dims[pad + i] = view.shape[i];
    strides[pad + i] = view.stride[i];
  }
  const size_t elem = static_cast<size_t>(dtype_size(view.dtype));
  const auto* src = static_cast<const uint8_t*>(view.data);
  uint8_t* dst = t.bytes_.data();
  for (int64_t i0 = 0; i0 < dims[0]; ++i0)
    for (int64_t i1 = 0; i1 < dims[1]; ++i1)
      for (int64_t i2 = 0; i2 < dims[2]; ++i2) {
        const int64_t row = i0 * strides[0] + i1 * strides[1] + i2 * strides[2];
        if (strides[3] == 1) {
          std::memcpy(dst, src + row * static_cast<int64_t>(elem), elem * static_cast<size_t>(dims[3]));
          dst += elem * static_cast<size_t>(dims[3]);
        } else {
          for (int64_t i3 = 0; i3 < dims[3]; ++i3, dst += elem) {
            std::memcpy(dst, src + (row + i3 * strides[3]) * static_cast<int64_t>(elem), elem);
          }
        }
      }
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;  // cannot overflow: the constructors checked
  return n;
}

TensorView Tensor::view() const {
  if (rank() > kMaxRank) {
    throw InvalidArgument(name_, "rank <= " + std::to_string(kMaxRank) + " to view as a tensor",
                          "rank " + std::to_string(rank()) + " shape " + detail::shape_to_string(shape_));
  }
  TensorView v;
  v.data = bytes_.empty() ? nullptr : const_cast<uint8_t*>(bytes_.data());
  v.dtype = dtype_;
  v.rank = rank();
  int64_t stride = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    v.shape[i] = shape_[i];
    v.stride[i] = stride;
    stride *= shape_[i];
  }
  return v;
}

bool Tensor::operator==(const Tensor& other) const {
  return name_ == other.name_ && dtype_ == other.dtype_ && shape_ == other.shape_ && bytes_ == other.bytes_;
}

void TensorFile::add(Tensor t) {
  if (contains(t.name())) throw InvalidArgument(t.name(), "a tensor name not already in the file", "a duplicate");
  index_.emplace(t.name(), tensors_.size());
  tensors_.push_back(std::move(t));
}

void TensorFile::set(Tensor t) {
  const auto it = index_.find(t.name());
  if (it != index_.end()) {
    tensors_[it->second] = std::move(t);
  } else {
    add(std::move(t));
  }
}

const Tensor* TensorFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const Tensor& TensorFile::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string present;
  constexpr size_t kListed = 16;  // enough to spot a typo without flooding the message for large checkpoints
  for (size_t i = 0; i < tensors_.size() && i < kListed; ++i) present += (i ? ", " : "") + tensors_[i].name();
  if (tensors_.size() > kListed) present += ", ... (" + std::to_string(tensors_.size()) + " tensors)";
  throw InvalidArgument(name, "a tensor present in the file (" + (present.empty() ? "none" : present) + ")",
                        "no tensor of that name");
}

bool TensorFile::operator==(const TensorFile& other) const {
  return tensors_ == other.tensors_ && metadata == other.metadata;
}

}  // namespace dashattn::io
