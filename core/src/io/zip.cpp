#include "zip.h"

#include <algorithm>
#include <set>

#if defined(DASHATTN_HAVE_ZLIB)
#include <zlib.h>
#endif

namespace dashattn::io::detail {
namespace {

constexpr uint32_t kLocalSignature = 0x04034b50u;
constexpr uint32_t kCentralSignature = 0x02014b50u;
constexpr uint32_t kEndSignature = 0x06054b50u;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50u;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndRecordSize = 22;
constexpr size_t kZip64LocatorSize = 20;
constexpr uint16_t kFlagEncrypted = 1u << 0;
constexpr uint16_t kFlagDataDescriptor = 1u << 3;
constexpr uint16_t kFlagUtf8Name = 1u << 11;
constexpr uint16_t kZip64ExtraId = 0x0001;
// Deflate cannot expand data by more than about 1032:1; a larger declared ratio is a lie (or a bomb).
constexpr uint64_t kMaxDeflateRatio = 1032;

std::string zip64_unsupported() { return "zip64 archives are not supported (archive over 4 GiB or 65535 members)"; }

void check_member_name(const std::string& archive, const std::string& name) {
  const std::string quoted = "member name '" + name + "'";
  if (name.empty()) fail(archive, "empty member name");
  size_t start = 0;
  for (;;) {
    const size_t end = name.find_first_of("/\\", start);
    if (name.compare(start, end == std::string::npos ? std::string::npos : end - start, "..") == 0) {
      fail(archive, quoted + " contains a parent-directory '..' component");
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (name.find_first_of("/\\") != std::string::npos) fail(archive, quoted + " contains a path separator");
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) fail(archive, quoted + " contains control characters");
  }
}

// Sizes of a local header whose 32-bit fields are 0xFFFFFFFF live in its zip64 extra field (numpy.savez writes
// such headers for every member, even small ones, while its central directory stays plain).
bool local_zip64_sizes(const std::vector<uint8_t>& extra, uint64_t* uncompressed, uint64_t* compressed) {
  size_t pos = 0;
  while (pos + 4 <= extra.size()) {
    const uint16_t id = load_le16(&extra[pos]);
    const uint16_t len = load_le16(&extra[pos + 2]);
    if (pos + 4 + len > extra.size()) return false;
    if (id == kZip64ExtraId) {
      if (len < 16) return false;
      *uncompressed = load_le64(&extra[pos + 4]);
      *compressed = load_le64(&extra[pos + 12]);
      return true;
    }
    pos += 4 + len;
  }
  return false;
}

void check_local_header(const ByteSource& archive, ZipMember& m, uint64_t local_offset, uint16_t central_flags,
                        uint64_t central_directory_offset) {
  const std::string& source = archive.name();
  const std::string where = "member '" + m.name + "': ";
  if (local_offset > central_directory_offset || central_directory_offset - local_offset < kLocalHeaderSize) {
    fail(source, where + "local header offset " + std::to_string(local_offset) + " is beyond the member area");
  }
  uint8_t h[kLocalHeaderSize];
  archive.read(local_offset, h, sizeof h);
  if (load_le32(h) != kLocalSignature) fail(source, where + "bad local header signature");
  const uint16_t name_len = load_le16(h + 26), extra_len = load_le16(h + 28);
  const uint64_t data_offset = local_offset + kLocalHeaderSize + name_len + extra_len;
  if (data_offset > central_directory_offset || m.compressed_size > central_directory_offset - data_offset) {
    fail(source, where + "data extends beyond the member area (truncated or overlapping the directory)");
  }
  const std::vector<uint8_t> name = archive.read_vector(local_offset + kLocalHeaderSize, name_len);
  if (std::string(name.begin(), name.end()) != m.name) fail(source, where + "local header names a different member");
  if (load_le16(h + 8) != m.method) fail(source, where + "local and central headers disagree on the method");
  if ((load_le16(h + 6) & kFlagEncrypted) != 0) fail(source, where + "encrypted members are not supported");

  const bool descriptor = (central_flags & kFlagDataDescriptor) != 0 || (load_le16(h + 6) & kFlagDataDescriptor);
  uint64_t local_compressed = load_le32(h + 18), local_uncompressed = load_le32(h + 22);
  if (local_compressed == 0xffffffffu && local_uncompressed == 0xffffffffu) {
    const std::vector<uint8_t> extra = archive.read_vector(local_offset + kLocalHeaderSize + name_len, extra_len);
    if (!local_zip64_sizes(extra, &local_uncompressed, &local_compressed)) {
      fail(source, where + "local header has zip64 size markers but no valid zip64 extra field");
    }
  }
  // With a data descriptor the local fields may be zero; the central directory is authoritative either way.
  const bool zero_local = local_compressed == 0 && local_uncompressed == 0 && load_le32(h + 14) == 0;
  if (!(descriptor && zero_local)) {
    if (local_compressed != m.compressed_size || local_uncompressed != m.uncompressed_size) {
      fail(source, where + "sizes in the local header disagree with the central directory");
    }
    if (load_le32(h + 14) != m.crc32 && !(descriptor && load_le32(h + 14) == 0)) {
      fail(source, where + "CRC-32 in the local header disagrees with the central directory");
    }
  }
  m.data_offset = data_offset;
}

void verify_crc(const ByteSource& member, uint32_t expected) {
  std::vector<uint8_t> buffer(std::min<uint64_t>(member.size(), 1u << 20));
  uint32_t crc = 0;
  for (uint64_t pos = 0; pos < member.size(); pos += buffer.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), member.size() - pos));
    member.read(pos, buffer.data(), n);
    crc = crc32_update(crc, buffer.data(), n);
  }
  if (crc != expected) fail(member.name(), "CRC-32 mismatch (corrupt member)");
}

class OwnedMemorySource final : public ByteSource {
 public:
  OwnedMemorySource(std::vector<uint8_t> bytes, std::string name) : ByteSource(std::move(name)), bytes_(std::move(bytes)) {
    size_ = bytes_.size();
  }

 private:
  void read_unchecked(uint64_t offset, void* dst, size_t n) const override {
    std::copy_n(bytes_.data() + offset, n, static_cast<uint8_t*>(dst));
  }
  std::vector<uint8_t> bytes_;
};

#if defined(DASHATTN_HAVE_ZLIB)
std::vector<uint8_t> inflate_member(const ByteSource& archive, const ZipMember& m, const std::string& name) {
  if (m.uncompressed_size > m.compressed_size * kMaxDeflateRatio + 1024) {
    fail(name, "declared size " + std::to_string(m.uncompressed_size) + " is impossible for " +
                   std::to_string(m.compressed_size) + " deflated bytes");
  }
  std::vector<uint8_t> in = archive.read_vector(m.data_offset, static_cast<size_t>(m.compressed_size));
  std::vector<uint8_t> out(static_cast<size_t>(std::max<uint64_t>(m.uncompressed_size, 1)));
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail(name, "cannot initialise zlib");
  zs.next_in = in.data();
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(m.uncompressed_size);
  const int rc = inflate(&zs, Z_FINISH);
  const bool output_full = zs.avail_out == 0;
  const uInt input_left = zs.avail_in;
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    if (output_full && rc != Z_DATA_ERROR) {
      fail(name, "inflates to more than the declared " + std::to_string(m.uncompressed_size) + " bytes");
    }
    fail(name, "corrupt or truncated deflate data");
  }
  if (!output_full) fail(name, "inflates to fewer than the declared " + std::to_string(m.uncompressed_size) + " bytes");
  if (input_left != 0) fail(name, "compressed size disagrees with the deflate stream");
  out.resize(static_cast<size_t>(m.uncompressed_size));
  return out;
}
#endif

}  // namespace

bool zip_deflate_supported() noexcept {
#if defined(DASHATTN_HAVE_ZLIB)
  return true;
#else
  return false;
#endif
}

std::vector<ZipMember> read_zip_directory(const ByteSource& archive) {
  const std::string& source = archive.name();
  const uint64_t size = archive.size();
  if (size < kEndRecordSize) fail(source, "too short for a zip archive: " + std::to_string(size) + " bytes");

  // The end record sits at the very end, followed only by its comment (at most 65535 bytes).
  const uint64_t window = std::min<uint64_t>(size, kEndRecordSize + 0xffff);
  const std::vector<uint8_t> tail = archive.read_vector(size - window, static_cast<size_t>(window));
  uint64_t end_pos = UINT64_MAX;
  for (size_t i = tail.size() - kEndRecordSize + 1; i-- > 0;) {
    if (load_le32(&tail[i]) == kEndSignature && load_le16(&tail[i + 20]) == tail.size() - i - kEndRecordSize) {
      end_pos = size - window + i;
      break;
    }
  }
  if (end_pos == UINT64_MAX) fail(source, "no zip end-of-central-directory record (not a zip archive, or truncated)");
  const uint8_t* e = &tail[end_pos - (size - window)];
  const uint16_t disk = load_le16(e + 4), directory_disk = load_le16(e + 6);
  const uint16_t entries_here = load_le16(e + 8), entries = load_le16(e + 10);
  const uint32_t directory_size = load_le32(e + 12), directory_offset = load_le32(e + 16);
  if (entries == 0xffff || directory_size == 0xffffffffu || directory_offset == 0xffffffffu) {
    fail(source, zip64_unsupported());
  }
  if (end_pos >= kZip64LocatorSize) {
    uint8_t locator[4];
    archive.read(end_pos - kZip64LocatorSize, locator, 4);
    if (load_le32(locator) == kZip64LocatorSignature) fail(source, zip64_unsupported());
  }
  if (disk != 0 || directory_disk != 0 || entries_here != entries) {
    fail(source, "multi-disk (split) zip archives are not supported");
  }
  if (static_cast<uint64_t>(directory_offset) + directory_size != end_pos) {
    fail(source, "central directory offset " + std::to_string(directory_offset) + " and size " +
                     std::to_string(directory_size) + " disagree with the end record at " + std::to_string(end_pos));
  }

  const std::vector<uint8_t> dir = archive.read_vector(directory_offset, directory_size);
  std::vector<ZipMember> members;
  std::set<std::string> names;
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // [local header, end of data) per member
  size_t pos = 0;
  for (uint16_t i = 0; i < entries; ++i) {
    if (dir.size() - pos < kCentralHeaderSize || load_le32(&dir[pos]) != kCentralSignature) {
      fail(source, "bad central directory entry " + std::to_string(i) + " (signature or size)");
    }
    const uint8_t* c = &dir[pos];
    const uint16_t name_len = load_le16(c + 28), extra_len = load_le16(c + 30), comment_len = load_le16(c + 32);
    if (dir.size() - pos - kCentralHeaderSize < static_cast<size_t>(name_len) + extra_len + comment_len) {
      fail(source, "central directory entry " + std::to_string(i) + " runs past the directory");
    }
    ZipMember m;
    m.name.assign(reinterpret_cast<const char*>(c + kCentralHeaderSize), name_len);
    check_member_name(source, m.name);
    const std::string where = "member '" + m.name + "': ";
    const uint16_t flags = load_le16(c + 8);
    m.method = load_le16(c + 10);
    m.crc32 = load_le32(c + 16);
    const uint32_t compressed = load_le32(c + 20), uncompressed = load_le32(c + 24);
    const uint32_t local_offset = load_le32(c + 42);
    if (compressed == 0xffffffffu || uncompressed == 0xffffffffu || local_offset == 0xffffffffu) {
      fail(source, where + zip64_unsupported());
    }
    m.compressed_size = compressed;
    m.uncompressed_size = uncompressed;
    if ((flags & kFlagEncrypted) != 0) fail(source, where + "encrypted members are not supported");
    if (load_le16(c + 34) != 0) fail(source, where + "multi-disk (split) zip archives are not supported");
    if (m.method != 0 && m.method != 8) {
      fail(source, where + "compression method " + std::to_string(m.method) + " is not supported (stored or deflate)");
    }
    if (m.method == 0 && m.compressed_size != m.uncompressed_size) {
      fail(source, where + "stored member's compressed and uncompressed sizes disagree");
    }
    if (!names.insert(m.name).second) fail(source, "duplicate member name '" + m.name + "'");
    check_local_header(archive, m, local_offset, flags, directory_offset);
    extents.emplace_back(local_offset, m.data_offset + m.compressed_size);
    members.push_back(std::move(m));
    pos += kCentralHeaderSize + name_len + extra_len + comment_len;
  }
  if (pos != dir.size()) fail(source, "central directory size disagrees with its entries");

  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].second) fail(source, "members overlap");
  }
  return members;
}

std::unique_ptr<ByteSource> open_zip_member(const ByteSource& archive, const ZipMember& member) {
  const std::string name = archive.name() + ":" + member.name;
  std::unique_ptr<ByteSource> out;
  if (member.method == 0) {
    out = std::make_unique<SubSource>(archive, member.data_offset, member.uncompressed_size, name);
  } else {
#if defined(DASHATTN_HAVE_ZLIB)
    out = std::make_unique<OwnedMemorySource>(inflate_member(archive, member, name), name);
#else
    fail(name, "compressed npz (deflate, as numpy.savez_compressed writes) is not supported: this build has no "
               "zlib; re-save with numpy.savez");
#endif
  }
  verify_crc(*out, member.crc32);
  return out;
}

void ZipWriter::emit(const std::string& bytes) {
  sink_.write(bytes);
  offset_ += bytes.size();
}

void ZipWriter::add_stored(const std::string& name, uint64_t size, uint32_t crc32,
                           const std::function<void(ByteSink&)>& write_body) {
  if (written_.size() == 0xffff) fail(target_, zip64_unsupported());
  if (name.size() > 0xffff) fail(target_, "member name too long");
  if (offset_ > 0xfffffffeu || size > 0xfffffffeu) fail(target_, zip64_unsupported() + "; use .safetensors");
  const bool utf8 = std::any_of(name.begin(), name.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; });
  Written w{name, crc32, static_cast<uint32_t>(size), static_cast<uint32_t>(offset_)};
  std::string h;
  append_le(h, kLocalSignature, 4);
  append_le(h, 20, 2);  // version needed: 2.0
  append_le(h, utf8 ? kFlagUtf8Name : 0, 2);
  append_le(h, 0, 2);     // stored
  append_le(h, 0, 2);     // time 00:00:00
  append_le(h, 0x21, 2);  // date 1980-01-01: fixed so output is reproducible
  append_le(h, crc32, 4);
  append_le(h, size, 4);
  append_le(h, size, 4);
  append_le(h, name.size(), 2);
  append_le(h, 0, 2);
  emit(h + name);
  write_body(sink_);
  offset_ += size;
  written_.push_back(std::move(w));
}

void ZipWriter::finish() {
  if (offset_ > 0xffffffffu) fail(target_, zip64_unsupported() + "; use .safetensors");
  const uint64_t directory_offset = offset_;
  for (const Written& w : written_) {
    const bool utf8 = std::any_of(w.name.begin(), w.name.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; });
    std::string c;
    append_le(c, kCentralSignature, 4);
    append_le(c, 20, 2);  // made by: MS-DOS attributes, version 2.0
    append_le(c, 20, 2);
    append_le(c, utf8 ? kFlagUtf8Name : 0, 2);
    append_le(c, 0, 2);
    append_le(c, 0, 2);
    append_le(c, 0x21, 2);
    append_le(c, w.crc32, 4);
    append_le(c, w.size, 4);
    append_le(c, w.size, 4);
    append_le(c, w.name.size(), 2);
    append_le(c, 0, 2);  // extra
    append_le(c, 0, 2);  // comment
    append_le(c, 0, 2);  // disk
    append_le(c, 0, 2);  // internal attributes
    append_le(c, 0, 4);  // external attributes
    append_le(c, w.offset, 4);
    emit(c + w.name);
  }
  const uint64_t directory_size = offset_ - directory_offset;
  if (offset_ > 0xffffffffu) fail(target_, zip64_unsupported() + "; use .safetensors");
  std::string e;
  append_le(e, kEndSignature, 4);
  append_le(e, 0, 2);
  append_le(e, 0, 2);
  append_le(e, written_.size(), 2);
  append_le(e, written_.size(), 2);
  append_le(e, directory_size, 4);
  append_le(e, directory_offset, 4);
  append_le(e, 0, 2);  // comment length
  emit(e);
}

}  // namespace dashattn::io::detail
