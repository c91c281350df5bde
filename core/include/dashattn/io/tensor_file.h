// Tensor files: safetensors, NumPy .npy and .npz, read into owning tensors and written back.
//
// Every reader treats its input as untrusted: a malformed, truncated or inconsistent file is rejected with an
// IoError naming the file (and the tensor, where one is involved) and what is wrong. Sizes read from headers are
// checked against the input before anything is allocated (a deflated .npz member may inflate to at most deflate's
// maximum ratio). Data is always stored little-endian and row-major (C order). See docs/tensor-files.md.
//
//   dashattn::io::TensorFile f = dashattn::io::read_tensor_file("qkv.safetensors");
//   dashattn::TensorView q = f.at("q").view();
//   ...
//   dashattn::io::TensorFile out;
//   out.add(dashattn::io::Tensor::from_view("o", o_view));
//   dashattn::io::write_tensor_file("out.npz", out);
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dashattn/dtype.h"
#include "dashattn/tensor.h"

namespace dashattn::io {

// A named, owning, contiguous CPU tensor of any rank. Invariant: bytes().size() == numel() * dtype_size(dtype()).
class Tensor {
 public:
  Tensor() = default;  // an empty f32 tensor of shape [0]
  // Zero-filled. Throws InvalidArgument for a negative dimension or a size that overflows.
  Tensor(std::string name, DType dtype, std::vector<int64_t> shape);
  // Takes ownership of bytes (row-major, little-endian). Throws InvalidArgument if its size disagrees with shape.
  Tensor(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  // Copies a CPU view of any strides into a contiguous tensor. Throws InvalidArgument for non-CPU views.
  static Tensor from_view(std::string name, const TensorView& view);

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return bytes_.size(); }
  uint8_t* data() { return bytes_.data(); }
  const uint8_t* data() const { return bytes_.data(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  // A contiguous CPU view of the data (null data pointer when numel() == 0). Throws InvalidArgument naming the
  // tensor when its rank exceeds kMaxRank. The data may be written through the view even for a const tensor:
  // constness protects the name, dtype and shape (which a TensorFile indexes), not the values.
  TensorView view() const;

  // Same name, dtype, shape and bytes (bitwise: NaN payloads compare as stored).
  bool operator==(const Tensor& other) const;
  bool operator!=(const Tensor& other) const { return !(*this == other); }

 private:
  std::string name_;
  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_{0};
  std::vector<uint8_t> bytes_;
};

// Tensors in file order, unique by name, plus free-form string metadata (safetensors "__metadata__"; the NumPy
// formats have none and ignore it when writing). Tensors are only reachable as const, so names stay unique; their
// values can still be written through view().
class TensorFile {
 public:
  // Appends t. Throws InvalidArgument if a tensor of that name is already present.
  void add(Tensor t);
  // Appends t, or replaces the tensor of the same name in place.
  void set(Tensor t);
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  const Tensor* find(const std::string& name) const;  // nullptr when absent
  // Throws InvalidArgument naming the missing tensor and listing the ones present.
  const Tensor& at(const std::string& name) const;

  const std::vector<Tensor>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  bool empty() const { return tensors_.empty(); }
  std::vector<Tensor>::const_iterator begin() const { return tensors_.begin(); }
  std::vector<Tensor>::const_iterator end() const { return tensors_.end(); }

  std::map<std::string, std::string> metadata;

  bool operator==(const TensorFile& other) const;  // same tensors in the same order, same metadata
  bool operator!=(const TensorFile& other) const { return !(*this == other); }

 private:
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;  // name -> position in tensors_, so large files look up in O(log n)
};

enum class FileFormat { kSafetensors, kNpy, kNpz };

const char* file_format_name(FileFormat f) noexcept;  // "safetensors", "npy", "npz"

// Format implied by the path's extension (.safetensors, .npy, .npz); false for any other extension.
bool format_from_extension(const std::string& path, FileFormat* out) noexcept;

// Format recognised from the first bytes of a file: the NumPy magic, a zip signature, or an 8-byte length followed
// by '{' (safetensors). False when none matches.
bool format_from_magic(const uint8_t* data, size_t size, FileFormat* out) noexcept;

// Reads any supported file. The content decides the format; a known extension that disagrees with the content is
// an error. A .npy file yields one tensor named after the file's stem ("q.npy" -> "q").
TensorFile read_tensor_file(const std::string& path);

// Writes the format named by the extension. A .npy file takes exactly one tensor. bf16 cannot be stored in the
// NumPy formats (NumPy has no bf16): that is an IoError suggesting safetensors.
void write_tensor_file(const std::string& path, const TensorFile& file);

// --- safetensors ------------------------------------------------------------------------------------------------
// The header is written compactly with "__metadata__" first; tensors are stored by descending element size (as the
// safetensors library does) so each one is aligned to its element size, and read back in storage order.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u * 1000u * 1000u;

TensorFile read_safetensors(const std::string& path);
TensorFile parse_safetensors(const uint8_t* data, size_t size, const std::string& source = "<memory>");
void write_safetensors(const std::string& path, const TensorFile& file);
std::vector<uint8_t> serialize_safetensors(const TensorFile& file);

// --- NumPy .npy -------------------------------------------------------------------------------------------------
// Reads format versions 1.0, 2.0 and 3.0; dtypes <f4 <f2 <f8 <i4 <u4 |u1 (big-endian ones are byte-swapped).
// Writes version 1.0 (2.0 when the header needs it) exactly as numpy.save does.
Tensor read_npy(const std::string& path);  // named after the file's stem
Tensor parse_npy(const uint8_t* data, size_t size, const std::string& source = "<memory>",
                 const std::string& tensor_name = "");
void write_npy(const std::string& path, const Tensor& tensor);
std::vector<uint8_t> serialize_npy(const Tensor& tensor);

// --- NumPy .npz -------------------------------------------------------------------------------------------------
// A zip archive of "<name>.npy" members. Reads stored members, and deflated ones (numpy.savez_compressed) when
// built with zlib; writes stored members. Zip64 archives (over 4 GiB or 65535 members) are rejected.
TensorFile read_npz(const std::string& path);
TensorFile parse_npz(const uint8_t* data, size_t size, const std::string& source = "<memory>");
void write_npz(const std::string& path, const TensorFile& file);
std::vector<uint8_t> serialize_npz(const TensorFile& file);
bool compressed_npz_supported() noexcept;

}  // namespace dashattn::io
