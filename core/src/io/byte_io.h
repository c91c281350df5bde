// Byte sources and sinks shared by the tensor-file formats, plus the checked arithmetic every reader relies on.
//
// Readers pull bytes from a ByteSource by offset, so a file is never loaded twice into memory and every read is
// bounds-checked against the real size of the input before anything is allocated.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "dashattn/error.h"
#include "dashattn/io/tensor_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensor file IO assumes a little-endian host"
#endif

namespace dashattn::io::detail {

[[noreturn]] inline void fail(const std::string& source, const std::string& what) { throw IoError(source, what); }

class ByteSource {
 public:
  explicit ByteSource(std::string name) : name_(std::move(name)) {}
  virtual ~ByteSource() = default;
  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  // Copies [offset, offset + n) into dst; throws IoError ("truncated") when the range leaves the input.
  void read(uint64_t offset, void* dst, size_t n) const;
  std::vector<uint8_t> read_vector(uint64_t offset, size_t n) const;

 protected:
  virtual void read_unchecked(uint64_t offset, void* dst, size_t n) const = 0;
  uint64_t size_ = 0;

 private:
  std::string name_;
};

class MemorySource final : public ByteSource {
 public:
  MemorySource(const uint8_t* data, size_t size, std::string name);

 private:
  void read_unchecked(uint64_t offset, void* dst, size_t n) const override;
  const uint8_t* data_;
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path);  // throws IoError when missing, unreadable or not a regular file
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

 private:
  void read_unchecked(uint64_t offset, void* dst, size_t n) const override;
  std::FILE* file_ = nullptr;
};

// A window [offset, offset + size) of another source (a stored zip member), reported under its own name.
class SubSource final : public ByteSource {
 public:
  SubSource(const ByteSource& parent, uint64_t offset, uint64_t size, std::string name);

 private:
  void read_unchecked(uint64_t offset, void* dst, size_t n) const override;
  const ByteSource& parent_;
  uint64_t offset_;
};

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void* data, size_t n) = 0;
  void write(const std::string& s) { write(s.data(), s.size()); }
  void write(const std::vector<uint8_t>& v) { write(v.data(), v.size()); }
};

class VectorSink final : public ByteSink {
 public:
  void write(const void* data, size_t n) override;
  using ByteSink::write;
  std::vector<uint8_t> bytes;
};

// Writes to path, creating it at the first write (so an error found before any output leaves an existing file
// alone); a sink destroyed before commit() removes the partial file.
class FileSink final : public ByteSink {
 public:
  explicit FileSink(const std::string& path);
  ~FileSink() override;
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  void write(const void* data, size_t n) override;
  using ByteSink::write;
  void commit();  // flushes and closes; throws IoError on any write failure

 private:
  void open();
  std::string path_;
  std::FILE* file_ = nullptr;
};

inline uint16_t load_le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t load_le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
inline uint64_t load_le64(const uint8_t* p) {
  return static_cast<uint64_t>(load_le32(p)) | (static_cast<uint64_t>(load_le32(p + 4)) << 32);
}
inline void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xffu));
}

// Element count of shape, or false when a dimension is negative or the product of the nonzero dimensions
// overflows int64 (so every row-major stride of the shape fits, even when it has no elements).
bool checked_numel(const std::vector<int64_t>& shape, int64_t* numel) noexcept;
// Byte size numel * dtype_size, or false on overflow.
bool checked_nbytes(int64_t numel, DType dtype, uint64_t* nbytes) noexcept;
// "[2, 3]"
std::string shape_to_string(const std::vector<int64_t>& shape);

// The NumPy and safetensors limit on rank; more dimensions than this are treated as a malformed file.
constexpr size_t kMaxFileRank = 64;

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) noexcept;  // start with crc = 0

}  // namespace dashattn::io::detail
