// A minimal, strict zip reader and writer: exactly what .npz needs and nothing an attacker could steer.
//
// Reading trusts only the central directory, cross-checks every local header against it, requires members to be
// disjoint and inside the archive, verifies CRC-32s, and rejects encryption, zip64, multi-disk archives and member
// names that are paths. Members are stored (method 0) or, with zlib, deflated (method 8).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "byte_io.h"

namespace dashattn::io::detail {

struct ZipMember {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflated
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t data_offset = 0;  // of the (compressed) data, past the local header
};

// The members of the archive in central-directory order, validated as described above (CRCs are checked when a
// member is opened).
std::vector<ZipMember> read_zip_directory(const ByteSource& archive);

// The uncompressed bytes of a member as a source named "<archive>:<member>", after checking its CRC-32. Stored
// members are windows onto the archive; deflated ones are inflated into memory.
std::unique_ptr<ByteSource> open_zip_member(const ByteSource& archive, const ZipMember& member);

bool zip_deflate_supported() noexcept;

// Writes stored members one after another, then the central directory.
class ZipWriter {
 public:
  ZipWriter(ByteSink& sink, std::string target) : sink_(sink), target_(std::move(target)) {}
  // size and crc32 describe the bytes write_body emits.
  void add_stored(const std::string& name, uint64_t size, uint32_t crc32,
                  const std::function<void(ByteSink&)>& write_body);
  void finish();

 private:
  struct Written {
    std::string name;
    uint32_t crc32;
    uint32_t size;
    uint32_t offset;
  };
  void emit(const std::string& bytes);
  ByteSink& sink_;
  std::string target_;
  uint64_t offset_ = 0;
  std::vector<Written> written_;
};

}  // namespace dashattn::io::detail
