// Helpers for the tensor-file tests: byte builders for hand-made files and an IoError matcher.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "dashattn/error.h"
#include "dashattn/io/tensor_file.h"

namespace io_test {

using Bytes = std::vector<uint8_t>;

inline Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

inline void put_le(Bytes& out, uint64_t value, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

inline Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The message of the IoError f throws, or a marker saying it threw something else or nothing.
template <typename F>
std::string io_error_message(F&& f) {
  try {
    f();
  } catch (const dashattn::IoError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("!! not an IoError: ") + e.what();
  }
  return "!! no exception";
}

#define CHECK_IO_ERROR(expr, needle)                                              \
  do {                                                                            \
    const std::string io_msg_ = io_test::io_error_message([&] { (void)(expr); }); \
    INFO("message: " << io_msg_);                                                 \
    CHECK(io_msg_.find(needle) != std::string::npos);                             \
    CHECK(io_msg_.rfind("!!", 0) != 0);                                            \
  } while (0)

// safetensors: 8-byte little-endian header length, header, data.
inline Bytes safetensors_bytes(const std::string& header, const Bytes& data) {
  Bytes out;
  put_le(out, header.size(), 8);
  out.insert(out.end(), header.begin(), header.end());
  return concat(out, data);
}

// An .npy file with a given raw header text (the dict plus padding) and version.
inline Bytes npy_bytes(const std::string& header, const Bytes& data, int major = 1) {
  Bytes out = bytes_of(std::string("\x93NUMPY", 6));
  out.push_back(static_cast<uint8_t>(major));
  out.push_back(0);
  put_le(out, header.size(), major == 1 ? 2 : 4);
  out.insert(out.end(), header.begin(), header.end());
  return concat(out, data);
}

// The header numpy writes for a dict: padded with spaces so magic + length + header is a multiple of 64, '\n' last.
inline std::string padded_npy_header(const std::string& dict, int major = 1) {
  const size_t prefix = 8 + (major == 1 ? 2 : 4);
  const size_t pad = 64 - (prefix + dict.size() + 1) % 64;
  return dict + std::string(pad, ' ') + "\n";
}

// Bitwise CRC-32 (independent of the library's table-driven one).
inline uint32_t reference_crc32(const Bytes& data) {
  uint32_t crc = 0xffffffffu;
  for (uint8_t byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

struct ZipMemberSpec {
  std::string name;
  Bytes payload;          // as stored in the archive (deflated when method == 8)
  uint16_t method = 0;
  uint32_t crc = 0;       // of the uncompressed bytes
  uint32_t uncompressed_size = 0;
  bool numpy_zip64_local = false;  // local header sizes in a zip64 extra field, as numpy.savez writes them
};

inline ZipMemberSpec stored_member(const std::string& name, const Bytes& data) {
  return {name, data, 0, reference_crc32(data), static_cast<uint32_t>(data.size()), false};
}

// A plain zip archive (central directory right before the end record), built field by field.
inline Bytes build_zip(const std::vector<ZipMemberSpec>& members) {
  Bytes out;
  std::vector<uint32_t> offsets;
  for (const ZipMemberSpec& m : members) {
    offsets.push_back(static_cast<uint32_t>(out.size()));
    put_le(out, 0x04034b50u, 4);
    put_le(out, m.numpy_zip64_local ? 45 : 20, 2);
    put_le(out, 0, 2);
    put_le(out, m.method, 2);
    put_le(out, 0, 2);
    put_le(out, 0x21, 2);
    put_le(out, m.crc, 4);
    put_le(out, m.numpy_zip64_local ? 0xffffffffu : m.payload.size(), 4);
    put_le(out, m.numpy_zip64_local ? 0xffffffffu : m.uncompressed_size, 4);
    put_le(out, m.name.size(), 2);
    put_le(out, m.numpy_zip64_local ? 20 : 0, 2);
    out.insert(out.end(), m.name.begin(), m.name.end());
    if (m.numpy_zip64_local) {
      put_le(out, 0x0001, 2);
      put_le(out, 16, 2);
      put_le(out, m.uncompressed_size, 8);
      put_le(out, m.payload.size(), 8);
    }
    out.insert(out.end(), m.payload.begin(), m.payload.end());
  }
  const size_t directory_offset = out.size();
  for (size_t i = 0; i < members.size(); ++i) {
    const ZipMemberSpec& m = members[i];
    put_le(out, 0x02014b50u, 4);
    put_le(out, 0x031e, 2);
    put_le(out, m.numpy_zip64_local ? 45 : 20, 2);
    put_le(out, 0, 2);
    put_le(out, m.method, 2);
    put_le(out, 0, 2);
    put_le(out, 0x21, 2);
    put_le(out, m.crc, 4);
    put_le(out, m.payload.size(), 4);
    put_le(out, m.uncompressed_size, 4);
    put_le(out, m.name.size(), 2);
    put_le(out, 0, 2);
    put_le(out, 0, 2);
    put_le(out, 0, 2);
    put_le(out, 0, 2);
    put_le(out, 0x01800000u, 4);
    put_le(out, offsets[i], 4);
    out.insert(out.end(), m.name.begin(), m.name.end());
  }
  const size_t directory_size = out.size() - directory_offset;
  put_le(out, 0x06054b50u, 4);
  put_le(out, 0, 2);
  put_le(out, 0, 2);
  put_le(out, members.size(), 2);
  put_le(out, members.size(), 2);
  put_le(out, directory_size, 4);
  put_le(out, directory_offset, 4);
  put_le(out, 0, 2);
  return out;
}

inline dashattn::io::Tensor make_tensor(const std::string& name, dashattn::DType dtype, std::vector<int64_t> shape,
                                        uint8_t seed = 1) {
  dashattn::io::Tensor t(name, dtype, std::move(shape));
  for (size_t i = 0; i < t.nbytes(); ++i) t.data()[i] = static_cast<uint8_t>(seed + 31 * i + (i >> 7));
  return t;
}

// A path in the test's working directory, removed when the object goes out of scope.
class TempPath {
 public:
  explicit TempPath(const std::string& name) : path_("io_test_tmp_" + name) { std::remove(path_.c_str()); }
  ~TempPath() { std::remove(path_.c_str()); }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const Bytes& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
}

inline Bytes read_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  Bytes out;
  uint8_t buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

}  // namespace io_test
