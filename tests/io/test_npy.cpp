// .npy: the bytes numpy.save writes, headers of every version, every malformed-file class, and round trips.
#include <cstring>

#include "io/io_test_support.h"

using dashattn::DType;
using dashattn::io::parse_npy;
using dashattn::io::serialize_npy;
using dashattn::io::Tensor;
using io_test::Bytes;
using io_test::npy_bytes;
using io_test::padded_npy_header;

namespace {

template <typename T>
Bytes raw(std::initializer_list<T> values) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

std::string dict(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

Bytes simple_npy(const std::string& descr, const std::string& shape, const Bytes& data) {
  return npy_bytes(padded_npy_header(dict(descr, shape)), data);
}

}  // namespace

TEST_CASE("npy: numpy.save bytes for a float32 [2, 3] array, read and written identically") {
  // numpy reserves 21 digits for the first axis (20 spaces after "2"), then pads to 64 bytes with a final '\n'.
  const std::string header = padded_npy_header(dict("<f4", "(2, 3)") + std::string(20, ' '));
  const Bytes data = raw<float>({0, 1, 2, 3, 4, 5});
  const Bytes file = npy_bytes(header, data);
  REQUIRE(file.size() == 128 + 24);
  CHECK(file[127] == '\n');

  const Tensor t = parse_npy(file.data(), file.size(), "a.npy", "a");
  CHECK(t.name() == "a");
  CHECK(t.dtype() == DType::kF32);
  CHECK(t.shape() == std::vector<int64_t>{2, 3});
  CHECK(t.bytes() == data);
  CHECK(serialize_npy(t) == file);
}

TEST_CASE("npy: numpy.save bytes for scalars, vectors and every supported dtype") {
  const Bytes scalar = npy_bytes(padded_npy_header(dict("<f8", "()")), raw<double>({2.5}));
  const Tensor s = parse_npy(scalar.data(), scalar.size());
  CHECK(s.rank() == 0);
  CHECK(s.dtype() == DType::kF64);
  CHECK(serialize_npy(s) == scalar);

  const Bytes vector = npy_bytes(padded_npy_header(dict("|u1", "(5,)") + std::string(20, ' ')), Bytes{1, 2, 3, 4, 5});
  const Tensor v = parse_npy(vector.data(), vector.size());
  CHECK(v.shape() == std::vector<int64_t>{5});
  CHECK(v.dtype() == DType::kU8);
  CHECK(serialize_npy(v) == vector);

  const std::pair<const char*, DType> kinds[] = {{"<f4", DType::kF32}, {"<f2", DType::kF16}, {"<f8", DType::kF64},
                                                 {"<i4", DType::kI32}, {"<u4", DType::kU32}, {"|u1", DType::kU8}};
  for (const auto& [descr, dtype] : kinds) {
    const Tensor t = io_test::make_tensor("t", dtype, {10, 3});
    const Bytes expected = npy_bytes(padded_npy_header(dict(descr, "(10, 3)") + std::string(19, ' ')), t.bytes());
    CHECK(serialize_npy(t) == expected);
    CHECK(parse_npy(expected.data(), expected.size(), "<memory>", "t") == t);
  }
}

TEST_CASE("npy: versions 2.0 and 3.0, unaligned old-style headers and native byte order are read") {
  const Bytes data = raw<int32_t>({-1, 7});
  for (int major : {2, 3}) {
    const Bytes b = npy_bytes(padded_npy_header(dict("<i4", "(2,)"), major), data, major);
    const Tensor t = parse_npy(b.data(), b.size());
    CHECK(t.dtype() == DType::kI32);
    CHECK(t.bytes() == data);
  }
  // numpy before 1.9 aligned to 16 bytes and wrote no growth padding; only whitespace may follow the dict.
  const Bytes old = npy_bytes(dict("=i4", "(2,)") + "   \n", data);
  CHECK(parse_npy(old.data(), old.size()).bytes() == data);
  const Bytes double_quoted = npy_bytes("{\"descr\": \"<i4\", \"shape\": (2,), \"fortran_order\": False}\n", data);
  CHECK(parse_npy(double_quoted.data(), double_quoted.size()).bytes() == data);
}

TEST_CASE("npy: big-endian data is byte-swapped to little-endian") {
  const Bytes b = simple_npy(">f4", "(2,)", Bytes{0x3f, 0x80, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00});
  const Tensor t = parse_npy(b.data(), b.size());
  float v[2];
  std::memcpy(v, t.data(), 8);
  CHECK(v[0] == 1.0f);
  CHECK(v[1] == -2.0f);
  const Bytes u16 = simple_npy(">f2", "(1,)", Bytes{0x3c, 0x00});
  CHECK(dashattn::f16_to_float(*reinterpret_cast<const uint16_t*>(parse_npy(u16.data(), u16.size()).data())) == 1.0f);
  const Bytes f64 = simple_npy(">f8", "()", Bytes{0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18});
  double pi;
  std::memcpy(&pi, parse_npy(f64.data(), f64.size()).data(), 8);
  CHECK(pi == 3.141592653589793);
}

TEST_CASE("npy: round trip of every NumPy-representable dtype at ranks 0 to 4, rank 5 and empty") {
  const std::vector<std::vector<int64_t>> shapes = {{}, {3}, {2, 3}, {2, 1, 3}, {1, 2, 3, 2}, {1, 1, 2, 1, 2}, {0, 4}};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kF64, DType::kI32, DType::kU32, DType::kU8}) {
    for (const auto& shape : shapes) {
      const Tensor t = io_test::make_tensor("r", dtype, shape, 9);
      const Bytes b = serialize_npy(t);
      CHECK(b.size() % 64 == t.nbytes() % 64);  // data starts 64-byte aligned
      CHECK(parse_npy(b.data(), b.size(), "<memory>", "r") == t);
    }
  }
}

TEST_CASE("npy: bf16 is refused with a pointer to safetensors, without creating a file") {
  const Tensor t = io_test::make_tensor("w", DType::kBF16, {4});
  CHECK_IO_ERROR(serialize_npy(t), "safetensors");
  io_test::TempPath path("bf16.npy");
  CHECK_IO_ERROR(dashattn::io::write_npy(path.str(), t), "tensor 'w': bf16");
  CHECK(std::fopen(path.str().c_str(), "rb") == nullptr);
}

TEST_CASE("npy: magic, version and header framing problems") {
  const Bytes good = simple_npy("<f4", "(1,)", Bytes(4, 0));
  SUBCASE("bad magic") {
    Bytes b = good;
    b[1] = 'M';
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "bad magic");
  }
  SUBCASE("unsupported version") {
    Bytes b = good;
    b[6] = 4;
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "version 4.0");
    b[6] = 1;
    b[7] = 1;
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "version 1.1");
  }
  SUBCASE("too short") {
    CHECK_IO_ERROR(parse_npy(good.data(), 9), "too short");
  }
  SUBCASE("header length beyond the file") {
    Bytes b = good;
    b[8] = 0xff;
    b[9] = 0x7f;
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "truncated");
  }
  SUBCASE("header length over the limit") {
    Bytes b = npy_bytes(padded_npy_header(dict("<f4", "(1,)"), 2), Bytes(4, 0), 2);
    b[11] = 0x10;
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "exceeds the limit");
  }
}

TEST_CASE("npy: header must be the dict literal numpy writes") {
  const Bytes data(4, 0);
  const auto header_error = [&](const std::string& header, const std::string& needle) {
    const Bytes b = npy_bytes(header + "\n", data);
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), needle);
  };
  header_error("[1, 2]", "dict literal");
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", "expected ',' or '}'");
  header_error(dict("<f4", "(1,)") + " x", "unexpected text");
  header_error("{'descr': '<f4', 'shape': (1,)}", "must have keys");
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", "unexpected key 'extra'");
  header_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", "duplicate key");
  header_error(dict("<f4", "(1)"), "write (n,)");
  header_error(dict("<f4", "[1]"), "must be a tuple");
  header_error(dict("<f4", "(1,)", "0"), "True or False");
  header_error("{'descr': '<\\f4', 'fortran_order': False, 'shape': (1,)}", "escapes");
  header_error("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", "structured");
}

TEST_CASE("npy: unsupported layouts and dtypes") {
  const Bytes data(8, 0);
  const Bytes fortran = npy_bytes(padded_npy_header(dict("<f4", "(1, 2)", "True")), data);
  CHECK_IO_ERROR(parse_npy(fortran.data(), fortran.size()), "fortran_order=True");
  const Bytes object = simple_npy("|O", "(1,)", data);
  CHECK_IO_ERROR(parse_npy(object.data(), object.size()), "pickled object");
  for (const char* descr : {"<i8", "<c8", "|b1", "<U1", "|V2", "|f4", "<f16", "x"}) {
    const Bytes b = simple_npy(descr, "(1,)", data);
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "unsupported dtype descr");
  }
}

TEST_CASE("npy: shape entries and data size") {
  SUBCASE("negative") {
    const Bytes b = simple_npy("<f4", "(-1,)", {});
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "must not be negative");
  }
  SUBCASE("non-integer") {
    const Bytes b = simple_npy("<f4", "(1.5,)", {});
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "expected ',' or ')'");
    const Bytes name = simple_npy("<f4", "(n,)", {});
    CHECK_IO_ERROR(parse_npy(name.data(), name.size()), "must be integers");
  }
  SUBCASE("too large for 64 bits") {
    const Bytes b = simple_npy("<f4", "(99999999999999999999,)", {});
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "does not fit in 64 bits");
  }
  SUBCASE("product overflows") {
    const Bytes b = simple_npy("<f4", "(4294967296, 4294967296)", {});
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "overflows");
    const Bytes empty = simple_npy("<i4", "(0, 555555552, 5555515555552, 555520)", {});
    CHECK_IO_ERROR(parse_npy(empty.data(), empty.size()), "overflows");
  }
  SUBCASE("truncated data") {
    const Bytes b = simple_npy("<f4", "(3,)", Bytes(11, 0));
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "truncated data");
  }
  SUBCASE("trailing data") {
    const Bytes b = simple_npy("<f4", "(3,)", Bytes(13, 0));
    CHECK_IO_ERROR(parse_npy(b.data(), b.size()), "1 unexpected bytes");
  }
}
