#include "byte_io.h"

#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace dashattn::io::detail {

void ByteSource::read(uint64_t offset, void* dst, size_t n) const {
  if (offset > size_ || n > size_ - offset) {
    fail(name_, "truncated: needs bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                    ") but the input has only " + std::to_string(size_) + " bytes");
  }
  if (n > 0) read_unchecked(offset, dst, n);
}

std::vector<uint8_t> ByteSource::read_vector(uint64_t offset, size_t n) const {
  // Check before allocating: the size may come from an untrusted header.
  if (offset > size_ || n > size_ - offset) read(offset, nullptr, n);
  std::vector<uint8_t> out(n);
  read(offset, out.data(), n);
  return out;
}

MemorySource::MemorySource(const uint8_t* data, size_t size, std::string name)
    : ByteSource(std::move(name)), data_(data) {
  if (data == nullptr && size != 0) fail(this->name(), "null data pointer with nonzero size");
  size_ = size;
}

void MemorySource::read_unchecked(uint64_t offset, void* dst, size_t n) const { std::memcpy(dst, data_ + offset, n); }

FileSource::FileSource(const std::string& path) : ByteSource(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  file_ = std::fopen(path.c_str(), "rb");
  if (file_ == nullptr) fail(path, std::string("cannot open: ") + std::strerror(errno));
  size_ = static_cast<uint64_t>(st.st_size);
}

FileSource::~FileSource() {
  if (file_ != nullptr) std::fclose(file_);
}

void FileSource::read_unchecked(uint64_t offset, void* dst, size_t n) const {
  if (fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0 || std::fread(dst, 1, n, file_) != n) {
    fail(name(), "read error at byte " + std::to_string(offset) + " (file changed while reading?)");
  }
}

SubSource::SubSource(const ByteSource& parent, uint64_t offset, uint64_t size, std::string name)
    : ByteSource(std::move(name)), parent_(parent), offset_(offset) {
  if (offset > parent.size() || size > parent.size() - offset) {
    fail(parent.name(), "member '" + this->name() + "' extends beyond the end of the input");
  }
  size_ = size;
}

void SubSource::read_unchecked(uint64_t offset, void* dst, size_t n) const { parent_.read(offset_ + offset, dst, n); }

void VectorSink::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  bytes.insert(bytes.end(), p, p + n);
}

FileSink::FileSink(const std::string& path) : path_(path) {}

void FileSink::open() {
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) fail(path_, std::string("cannot create: ") + std::strerror(errno));
}

FileSink::~FileSink() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(path_.c_str());
  }
}

void FileSink::write(const void* data, size_t n) {
  if (file_ == nullptr) open();
  if (n > 0 && std::fwrite(data, 1, n, file_) != n) fail(path_, std::string("write failed: ") + std::strerror(errno));
}

void FileSink::commit() {
  if (file_ == nullptr) open();
  std::FILE* f = file_;
  file_ = nullptr;
  if (std::fflush(f) != 0 || std::ferror(f) != 0) {
    const int err = errno;
    std::fclose(f);
    std::remove(path_.c_str());
    fail(path_, std::string("write failed: ") + std::strerror(err));
  }
  if (std::fclose(f) != 0) {
    const int err = errno;
    std::remove(path_.c_str());
    fail(path_, std::string("write failed: ") + std::strerror(err));
  }
}

bool checked_numel(const std::vector<int64_t>& shape, int64_t* numel) noexcept {
  // The product skips zero dimensions so that an empty tensor cannot hide dimensions whose row-major strides
  // overflow (a view computes them).
  int64_t nonzero_product = 1;
  bool empty = false;
  for (int64_t dim : shape) {
    if (dim < 0) return false;
    if (dim == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(nonzero_product, dim, &nonzero_product)) {
      return false;
    }
  }
  *numel = empty ? 0 : nonzero_product;
  return true;
}

bool checked_nbytes(int64_t numel, DType dtype, uint64_t* nbytes) noexcept {
  if (numel < 0) return false;
  return !__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(dtype_size(dtype)), nbytes);
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {
// The reflected CRC-32 of zip (polynomial 0xEDB88320), table-driven one byte at a time.
std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) noexcept {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return ~c;
}

}  // namespace dashattn::io::detail
