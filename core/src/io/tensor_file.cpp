// Format detection and the path-based entry points.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "formats.h"

namespace dashattn::io {
namespace {

std::string lowercase_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

std::string file_stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

}  // namespace

const char* file_format_name(FileFormat f) noexcept {
  switch (f) {
    case FileFormat::kSafetensors: return "safetensors";
    case FileFormat::kNpy: return "npy";
    case FileFormat::kNpz: return "npz";
  }
  return "unknown";
}

bool format_from_extension(const std::string& path, FileFormat* out) noexcept {
  try {
    const std::string ext = lowercase_extension(path);
    if (ext == ".safetensors") *out = FileFormat::kSafetensors;
    else if (ext == ".npy") *out = FileFormat::kNpy;
    else if (ext == ".npz") *out = FileFormat::kNpz;
    else return false;
    return true;
  } catch (...) {
    return false;
  }
}

bool format_from_magic(const uint8_t* data, size_t size, FileFormat* out) noexcept {
  if (size >= 6 && std::memcmp(data, "\x93NUMPY", 6) == 0) {
    *out = FileFormat::kNpy;
  } else if (size >= 4 && (std::memcmp(data, "PK\x03\x04", 4) == 0 || std::memcmp(data, "PK\x05\x06", 4) == 0)) {
    *out = FileFormat::kNpz;  // a member, or the end record of an empty archive
  } else if (size >= 9 && data[8] == '{') {
    *out = FileFormat::kSafetensors;
  } else {
    return false;
  }
  return true;
}

TensorFile read_tensor_file(const std::string& path) {
  const detail::FileSource src(path);
  uint8_t head[9] = {};
  const size_t head_size = static_cast<size_t>(std::min<uint64_t>(src.size(), sizeof head));
  src.read(0, head, head_size);
  FileFormat by_content{}, by_extension{};
  const bool content_known = format_from_magic(head, head_size, &by_content);
  const bool extension_known = format_from_extension(path, &by_extension);
  if (content_known && extension_known && by_content != by_extension) {
    detail::fail(path, std::string("extension says ") + file_format_name(by_extension) + " but the content is " +
                           file_format_name(by_content));
  }
  if (!content_known && !extension_known) {
    detail::fail(path, "unrecognised format: expected a .safetensors, .npy or .npz file");
  }
  // An unrecognised content under a known extension goes to that reader, whose error says what is wrong.
  switch (content_known ? by_content : by_extension) {
    case FileFormat::kSafetensors: return detail::read_safetensors_from(src);
    case FileFormat::kNpz: return detail::read_npz_from(src);
    case FileFormat::kNpy: break;
  }
  TensorFile file;
  file.add(detail::read_npy_from(src, file_stem(path)));
  return file;
}

void write_tensor_file(const std::string& path, const TensorFile& file) {
  FileFormat format{};
  if (!format_from_extension(path, &format)) {
    detail::fail(path, "cannot tell the format to write: use the extension .safetensors, .npy or .npz");
  }
  switch (format) {
    case FileFormat::kSafetensors: write_safetensors(path, file); return;
    case FileFormat::kNpz: write_npz(path, file); return;
    case FileFormat::kNpy: break;
  }
  if (file.size() != 1) {
    detail::fail(path, "a .npy file holds exactly one tensor, got " + std::to_string(file.size()) +
                           "; use .npz or .safetensors for several");
  }
  write_npy(path, *file.begin());
}

Tensor read_npy(const std::string& path) { return detail::read_npy_from(detail::FileSource(path), file_stem(path)); }

TensorFile read_npz(const std::string& path) { return detail::read_npz_from(detail::FileSource(path)); }

}  // namespace dashattn::io
