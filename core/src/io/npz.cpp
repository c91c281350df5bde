// NumPy .npz: a zip archive whose members are "<name>.npy" files, one per array (numpy.savez).
#include <algorithm>

#include "formats.h"
#include "zip.h"

namespace dashattn::io {
namespace detail {
namespace {

constexpr char kNpySuffix[] = ".npy";
constexpr size_t kNpySuffixLen = 4;

bool has_npy_suffix(const std::string& name) {
  return name.size() > kNpySuffixLen && name.compare(name.size() - kNpySuffixLen, kNpySuffixLen, kNpySuffix) == 0;
}

// Incrementally computes the CRC-32 of what a writer emits, so a member's CRC is known before it is written.
class CrcSink final : public ByteSink {
 public:
  void write(const void* data, size_t n) override {
    crc = crc32_update(crc, data, n);
    size += n;
  }
  using ByteSink::write;
  uint32_t crc = 0;
  uint64_t size = 0;
};

}  // namespace

TensorFile read_npz_from(const ByteSource& src) {
  TensorFile file;
  for (const ZipMember& m : read_zip_directory(src)) {
    if (!has_npy_suffix(m.name)) fail(src.name(), "member '" + m.name + "' is not a .npy file");
    const std::unique_ptr<ByteSource> member = open_zip_member(src, m);
    file.add(read_npy_from(*member, m.name.substr(0, m.name.size() - kNpySuffixLen)));
  }
  return file;
}

void write_npz_to(const TensorFile& file, ByteSink& sink, const std::string& target) {
  // Validate every member first so that a bad tensor does not leave a half-written archive behind.
  std::vector<std::string> headers;
  for (const Tensor& t : file) {
    const bool control = std::any_of(t.name().begin(), t.name().end(),
                                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
    if (t.name().empty() || control ||
        t.name().find_first_of("/\\") != std::string::npos) {
      fail(target, "tensor name '" + t.name() + "' cannot be an .npz member name (empty, a path, or control "
                   "characters)");
    }
    headers.push_back(npy_header(t, target));
  }
  // Local header + name + data, central entry + name, then the end record: all must fit 32-bit zip fields.
  uint64_t archive_size = 22;
  for (size_t i = 0; i < headers.size(); ++i) {
    const Tensor& t = file.tensors()[i];
    archive_size += 30 + 46 + 2 * (t.name().size() + kNpySuffixLen) + headers[i].size() + t.nbytes();
  }
  if (file.size() > 0xffff || archive_size > 0xffffffffu) {
    fail(target, "the archive would need zip64 (over 4 GiB or 65535 members), which is not supported; write "
                 ".safetensors instead");
  }
  ZipWriter zip(sink, target);
  size_t i = 0;
  for (const Tensor& t : file) {
    const std::string& header = headers[i++];
    CrcSink crc;
    crc.write(header);
    crc.write(t.data(), t.nbytes());
    zip.add_stored(t.name() + kNpySuffix, crc.size, crc.crc, [&](ByteSink& out) {
      out.write(header);
      out.write(t.data(), t.nbytes());
    });
  }
  zip.finish();
}

}  // namespace detail

bool compressed_npz_supported() noexcept { return detail::zip_deflate_supported(); }

TensorFile parse_npz(const uint8_t* data, size_t size, const std::string& source) {
  return detail::read_npz_from(detail::MemorySource(data, size, source));
}

std::vector<uint8_t> serialize_npz(const TensorFile& file) {
  detail::VectorSink sink;
  detail::write_npz_to(file, sink, "<memory>");
  return std::move(sink.bytes);
}

void write_npz(const std::string& path, const TensorFile& file) {
  detail::FileSink sink(path);
  detail::write_npz_to(file, sink, path);
  sink.commit();
}

}  // namespace dashattn::io
