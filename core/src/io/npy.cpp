// NumPy .npy: "\x93NUMPY", version (1.0, 2.0 or 3.0), a little-endian header length (2 bytes for 1.0, 4 after),
// a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and a
// final '\n' so the data starts 64-byte aligned, then the raw C-order data.
#include <algorithm>
#include <cstring>

#include "byte_io.h"
#include "formats.h"

namespace dashattn::io {
namespace detail {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// numpy itself refuses headers over 10000 bytes by default; this leaves room without trusting the length field.
constexpr uint32_t kMaxHeaderBytes = 1u << 20;

struct Descr {
  DType dtype;
  bool byteswap;
};

Descr parse_descr(const std::string& source, const std::string& descr) {
  const std::string quoted = "'" + descr + "'";
  if (descr.size() < 2) fail(source, "unsupported dtype descr " + quoted);
  const char order = descr[0];
  const std::string code = descr.substr(1);
  if (code == "O") fail(source, "dtype " + quoted + " is a pickled object array, which is never loaded");
  struct Known {
    const char* code;
    DType dtype;
  };
  constexpr Known kKnown[] = {{"f4", DType::kF32}, {"f2", DType::kF16}, {"f8", DType::kF64},
                              {"i4", DType::kI32}, {"u4", DType::kU32}, {"u1", DType::kU8}};
  for (const Known& k : kKnown) {
    if (code != k.code) continue;
    const bool single_byte = dtype_size(k.dtype) == 1;
    if (order == '<' || order == '=' || (order == '|' && single_byte)) return {k.dtype, false};
    if (order == '>') return {k.dtype, !single_byte};
    break;
  }
  fail(source, "unsupported dtype descr " + quoted + " (supported: <f4 <f2 <f8 <i4 <u4 |u1, either byte order)");
}

// A strict reader of the one dict literal numpy writes; anything else is rejected rather than guessed at.
class HeaderParser {
 public:
  HeaderParser(const std::string& source, const std::string& text) : source_(source), text_(text) {}

  void parse(std::string* descr, bool* fortran_order, std::vector<int64_t>* shape) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    skip_space();
    expect('{', "header must be a Python dict literal starting with '{'");
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = parse_string("a quoted dict key");
      skip_space();
      expect(':', "expected ':' after key '" + key + "'");
      skip_space();
      if (key == "descr") {
        if (seen_descr) error("duplicate key 'descr'");
        if (peek() == '[') error("structured (record) dtypes are not supported");
        *descr = parse_string("a quoted dtype string for 'descr'");
        seen_descr = true;
      } else if (key == "fortran_order") {
        if (seen_order) error("duplicate key 'fortran_order'");
        *fortran_order = parse_bool();
        seen_order = true;
      } else if (key == "shape") {
        if (seen_shape) error("duplicate key 'shape'");
        *shape = parse_shape();
        seen_shape = true;
      } else {
        error("unexpected key '" + key + "' (expected 'descr', 'fortran_order', 'shape')");
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') error("expected ',' or '}' after the value of '" + key + "'");
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) error("unexpected text after the dict literal");
    if (!seen_descr || !seen_order || !seen_shape) error("header must have keys 'descr', 'fortran_order', 'shape'");
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(source_, "malformed header at character " + std::to_string(pos_) + ": " + what);
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void expect(char c, const std::string& what) {
    if (peek() != c) error(what);
    ++pos_;
  }
  std::string parse_string(const std::string& what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') error("expected " + what);
    const size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\' || text_[pos_] == '\n') error("escapes and newlines in strings are not supported");
      ++pos_;
    }
    if (pos_ >= text_.size()) error("unterminated string");
    return text_.substr(start, pos_++ - start);
  }
  bool parse_bool() {
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    error("'fortran_order' must be True or False");
  }
  int64_t parse_dim() {
    if (peek() == '-') error("shape entries must not be negative");
    if (peek() < '0' || peek() > '9') error("shape entries must be integers");
    int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, peek() - '0', &value)) {
        error("shape entry does not fit in 64 bits");
      }
      ++pos_;
    }
    return value;
  }
  // Python tuple syntax: (), (n,), (a, b) and (a, b,); a bare (n) is an int, not a shape.
  std::vector<int64_t> parse_shape() {
    expect('(', "'shape' must be a tuple");
    std::vector<int64_t> shape;
    bool trailing_comma = false;
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      if (shape.size() == kMaxFileRank) error("rank exceeds " + std::to_string(kMaxFileRank));
      shape.push_back(parse_dim());
      skip_space();
      trailing_comma = peek() == ',';
      if (trailing_comma) {
        ++pos_;
      } else if (peek() != ')') {
        error("expected ',' or ')' in 'shape'");
      }
    }
    if (shape.size() == 1 && !trailing_comma) error("'shape' must be a tuple: write (n,) for rank 1");
    ++pos_;
    return shape;
  }

  const std::string& source_;
  const std::string& text_;
  size_t pos_ = 0;
};

std::string descr_of(const Tensor& t, const std::string& target) {
  switch (t.dtype()) {
    case DType::kF32: return "<f4";
    case DType::kF16: return "<f2";
    case DType::kF64: return "<f8";
    case DType::kI32: return "<i4";
    case DType::kU32: return "<u4";
    case DType::kU8: return "|u1";
    case DType::kBF16: break;
  }
  fail(target, "tensor '" + t.name() + "': bf16 cannot be stored in .npy/.npz (NumPy has no bfloat16); "
                   "write a .safetensors file instead, or convert to f32");
}

}  // namespace

Tensor read_npy_from(const ByteSource& src, const std::string& tensor_name) {
  const std::string& source = src.name();
  uint8_t prefix[12] = {};
  if (src.size() < 10) fail(source, "too short for .npy: " + std::to_string(src.size()) + " bytes");
  src.read(0, prefix, std::min<uint64_t>(src.size(), sizeof prefix));
  if (std::memcmp(prefix, kMagic, kMagicLen) != 0) fail(source, "bad magic: not a NumPy .npy file");
  const int major = prefix[6], minor = prefix[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    fail(source, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                     " (supported: 1.0, 2.0, 3.0)");
  }
  uint64_t header_begin = 10;
  uint32_t header_len = load_le16(prefix + 8);
  if (major >= 2) {
    if (src.size() < 12) fail(source, "truncated: the version " + std::to_string(major) + " header length needs 4 bytes");
    header_begin = 12;
    header_len = load_le32(prefix + 8);
  }
  if (header_len > kMaxHeaderBytes) {
    fail(source, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                     std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_len > src.size() - header_begin) {
    fail(source, "truncated: header length " + std::to_string(header_len) + " but only " +
                     std::to_string(src.size() - header_begin) + " bytes follow");
  }
  std::string text(header_len, '\0');
  src.read(header_begin, text.data(), header_len);

  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  HeaderParser(source, text).parse(&descr, &fortran_order, &shape);
  const Descr d = parse_descr(source, descr);
  if (fortran_order) {
    fail(source, "fortran_order=True (column-major) arrays are not supported; save a C-contiguous array "
                 "(numpy.ascontiguousarray)");
  }
  int64_t numel = 0;
  uint64_t nbytes = 0;
  if (!checked_numel(shape, &numel) || !checked_nbytes(numel, d.dtype, &nbytes)) {
    fail(source, "shape " + shape_to_string(shape) + " overflows 64-bit sizes");
  }
  const uint64_t data_begin = header_begin + header_len;
  const uint64_t available = src.size() - data_begin;
  if (available < nbytes) {
    fail(source, "truncated data: shape " + shape_to_string(shape) + " of '" + descr + "' needs " +
                     std::to_string(nbytes) + " bytes, only " + std::to_string(available) + " present");
  }
  if (available > nbytes) {
    fail(source, std::to_string(available - nbytes) + " unexpected bytes after the data of shape " +
                     shape_to_string(shape) + " of '" + descr + "'");
  }
  std::vector<uint8_t> bytes = src.read_vector(data_begin, static_cast<size_t>(nbytes));
  if (d.byteswap) {
    const size_t width = static_cast<size_t>(dtype_size(d.dtype));
    for (size_t i = 0; i < bytes.size(); i += width) std::reverse(bytes.begin() + i, bytes.begin() + i + width);
  }
  return Tensor(tensor_name, d.dtype, std::move(shape), std::move(bytes));
}

std::string npy_header(const Tensor& t, const std::string& target) {
  std::string dict = "{'descr': '" + descr_of(t, target) + "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < t.rank(); ++i) {
    if (i > 0) dict += ", ";
    dict += std::to_string(t.shape()[i]);
  }
  dict += t.rank() == 1 ? ",), }" : "), }";
  // numpy reserves room for the first axis to grow to 21 digits, so files can be appended to in place.
  if (t.rank() > 0) dict.append(21 - std::to_string(t.shape()[0]).size(), ' ');

  constexpr size_t kAlign = 64;
  for (int major : {1, 2}) {
    const size_t length_bytes = major == 1 ? 2 : 4;
    const size_t unpadded = dict.size() + 1;  // + the final '\n'
    const size_t pad = kAlign - (kMagicLen + 2 + length_bytes + unpadded) % kAlign;
    const size_t header_len = unpadded + pad;
    if (major == 1 && header_len > 0xffff) continue;
    std::string out(kMagic, kMagicLen);
    out.push_back(static_cast<char>(major));
    out.push_back('\0');
    append_le(out, header_len, static_cast<int>(length_bytes));
    out += dict;
    out.append(pad, ' ');
    out.push_back('\n');
    return out;
  }
  fail(target, "tensor '" + t.name() + "': .npy header too large");
}

void write_npy_to(const Tensor& t, ByteSink& sink, const std::string& target) {
  sink.write(npy_header(t, target));
  sink.write(t.data(), t.nbytes());
}

}  // namespace detail

Tensor parse_npy(const uint8_t* data, size_t size, const std::string& source, const std::string& tensor_name) {
  return detail::read_npy_from(detail::MemorySource(data, size, source), tensor_name);
}

std::vector<uint8_t> serialize_npy(const Tensor& tensor) {
  detail::VectorSink sink;
  detail::write_npy_to(tensor, sink, "<memory>");
  return std::move(sink.bytes);
}

void write_npy(const std::string& path, const Tensor& tensor) {
  detail::FileSink sink(path);
  detail::write_npy_to(tensor, sink, path);
  sink.commit();
}

}  // namespace dashattn::io
