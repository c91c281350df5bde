// safetensors: the bytes the reference library writes, every malformed-file class, and round trips.
#include <cstring>

#include "io/io_test_support.h"

using dashattn::DType;
using dashattn::io::parse_safetensors;
using dashattn::io::serialize_safetensors;
using dashattn::io::Tensor;
using dashattn::io::TensorFile;
using io_test::Bytes;
using io_test::safetensors_bytes;

namespace {

const DType kAllDtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kU32, DType::kU8};

// The library pads its compact JSON header with spaces to a multiple of 8 bytes.
std::string padded8(std::string header) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return header;
}

Bytes f32_bytes(std::initializer_list<float> values) {
  Bytes out(values.size() * 4);
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

// One valid F32 [2] tensor "x" at the given offsets, over data_size bytes of data.
Bytes one_tensor(const std::string& entry, size_t data_size) {
  return safetensors_bytes("{\"x\":" + entry + "}", Bytes(data_size, 0));
}

}  // namespace

TEST_CASE("safetensors: reads the bytes the safetensors library writes") {
  // safetensors.numpy.save_file({"a": float32 [[1, 2], [3, 4]], "b": bf16 [3]}, metadata={"format": "np"})
  const std::string header = padded8(
      "{\"__metadata__\":{\"format\":\"np\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]}}");
  const Bytes data = io_test::concat(f32_bytes({1, 2, 3, 4}), Bytes{0x80, 0x3f, 0x00, 0x40, 0x40, 0x40});
  const Bytes file = safetensors_bytes(header, data);

  const TensorFile f = parse_safetensors(file.data(), file.size());
  REQUIRE(f.size() == 2);
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "np"}});
  const Tensor& a = f.at("a");
  CHECK(a.dtype() == DType::kF32);
  CHECK(a.shape() == std::vector<int64_t>{2, 2});
  float av[4];
  std::memcpy(av, a.data(), 16);
  CHECK(av[3] == 4.0f);
  const Tensor& b = f.at("b");
  CHECK(b.dtype() == DType::kBF16);
  const auto* bv = reinterpret_cast<const uint16_t*>(b.data());
  CHECK(dashattn::bf16_to_float(bv[0]) == 1.0f);
  CHECK(dashattn::bf16_to_float(bv[1]) == 2.0f);
  CHECK(dashattn::bf16_to_float(bv[2]) == 3.0f);

  // And writes the same bytes back (sorted by element size, metadata first, compact JSON, space padding).
  CHECK(serialize_safetensors(f) == file);
}

TEST_CASE("safetensors: writer stores larger elements first so every tensor is aligned") {
  TensorFile f;
  f.add(io_test::make_tensor("half", DType::kF16, {3}));
  f.add(io_test::make_tensor("byte", DType::kU8, {1}));
  f.add(io_test::make_tensor("double", DType::kF64, {2}));
  const Bytes bytes = serialize_safetensors(f);
  const std::string expected_header =
      padded8("{\"double\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
              "\"half\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]},"
              "\"byte\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[22,23]}}");
  REQUIRE(bytes.size() == 8 + expected_header.size() + 23);
  CHECK(std::string(bytes.begin() + 8, bytes.begin() + 8 + expected_header.size()) == expected_header);
  const TensorFile back = parse_safetensors(bytes.data(), bytes.size());
  CHECK(back.tensors()[0].name() == "double");
  CHECK(back.at("half") == f.at("half"));
  CHECK(back.at("byte") == f.at("byte"));
  CHECK(back.at("double") == f.at("double"));
}

TEST_CASE("safetensors: round trip of every dtype at ranks 0 to 4, plus rank 5 and empty tensors") {
  const std::vector<std::vector<int64_t>> shapes = {{}, {3}, {2, 3}, {2, 1, 3}, {1, 2, 3, 2}, {1, 1, 2, 1, 2}, {0, 4}};
  TensorFile f;
  f.metadata["note"] = "round trip ✓";
  int index = 0;
  for (DType dtype : kAllDtypes) {
    for (const auto& shape : shapes) {
      f.add(io_test::make_tensor(std::string(dashattn::dtype_name(dtype)) + "_" + std::to_string(index), dtype,
                                 shape, static_cast<uint8_t>(index)));
      ++index;
    }
  }
  const Bytes bytes = serialize_safetensors(f);
  const TensorFile back = parse_safetensors(bytes.data(), bytes.size());
  CHECK(back.metadata == f.metadata);
  REQUIRE(back.size() == f.size());
  for (const Tensor& t : f) CHECK(back.at(t.name()) == t);
}

TEST_CASE("safetensors: header length and JSON problems") {
  SUBCASE("shorter than the length prefix") {
    const Bytes b = {1, 2, 3};
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "too short");
  }
  SUBCASE("header over 100 MB") {
    Bytes b;
    io_test::put_le(b, 100'000'001, 8);
    b.push_back('{');
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "exceeds the limit");
  }
  SUBCASE("header longer than the file") {
    Bytes b = safetensors_bytes("{}", {});
    b[0] = 50;
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "truncated");
  }
  SUBCASE("not JSON") {
    const Bytes b = safetensors_bytes("{\"x\": {\"dtype\": \"F32\",", {});
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "not valid JSON");
  }
  SUBCASE("not an object") {
    const Bytes b = safetensors_bytes("[1, 2, 3]", {});
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "JSON object");
  }
  SUBCASE("duplicate tensor names") {
    const std::string e = "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}";
    const Bytes b = safetensors_bytes("{\"x\":" + e + ",\"x\":" + e + "}", Bytes(1, 0));
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "duplicate tensor name \"x\"");
  }
  SUBCASE("duplicate field") {
    const Bytes b = one_tensor("{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1);
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "duplicate field");
  }
  SUBCASE("nesting deeper than the format needs") {
    const Bytes b = safetensors_bytes("{\"__metadata__\":" + std::string(100, '[') + std::string(100, ']') + "}", {});
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "nests deeper");
  }
  SUBCASE("metadata values must be strings") {
    const Bytes b = safetensors_bytes("{\"__metadata__\":{\"epoch\":3}}", {});
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "must be a string");
  }
}

TEST_CASE("safetensors: tensor entry problems name the tensor") {
  SUBCASE("entry not an object") {
    CHECK_IO_ERROR(parse_safetensors(one_tensor("[1]", 0).data(), one_tensor("[1]", 0).size()), "tensor 'x'");
  }
  SUBCASE("missing and unexpected fields") {
    const Bytes missing = one_tensor("{\"dtype\":\"U8\",\"shape\":[1]}", 1);
    CHECK_IO_ERROR(parse_safetensors(missing.data(), missing.size()), "missing field \"data_offsets\"");
    const Bytes extra = one_tensor("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"layout\":1}", 1);
    CHECK_IO_ERROR(parse_safetensors(extra.data(), extra.size()), "unexpected field \"layout\"");
  }
  SUBCASE("unknown and unsupported dtypes") {
    const Bytes unknown = one_tensor("{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,1]}", 1);
    CHECK_IO_ERROR(parse_safetensors(unknown.data(), unknown.size()), "tensor 'x': unknown dtype \"F99\"");
    const Bytes i64 = one_tensor("{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}", 8);
    CHECK_IO_ERROR(parse_safetensors(i64.data(), i64.size()), "dtype I64 is not supported");
    const Bytes number = one_tensor("{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}", 4);
    CHECK_IO_ERROR(parse_safetensors(number.data(), number.size()), "\"dtype\" must be a string");
  }
  SUBCASE("negative and non-integer shape entries") {
    const Bytes negative = one_tensor("{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}", 0);
    CHECK_IO_ERROR(parse_safetensors(negative.data(), negative.size()), "is negative");
    const Bytes fractional = one_tensor("{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}", 1);
    CHECK_IO_ERROR(parse_safetensors(fractional.data(), fractional.size()), "not an integer");
    const Bytes text = one_tensor("{\"dtype\":\"U8\",\"shape\":[\"1\"],\"data_offsets\":[0,1]}", 1);
    CHECK_IO_ERROR(parse_safetensors(text.data(), text.size()), "not an integer");
    const Bytes scalar = one_tensor("{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}", 1);
    CHECK_IO_ERROR(parse_safetensors(scalar.data(), scalar.size()), "\"shape\" must be an array");
  }
  SUBCASE("shape product overflows") {
    const Bytes b = one_tensor(
        "{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}", 0);
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "overflows");
    const Bytes bytes_overflow = one_tensor(
        "{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}", 0);
    CHECK_IO_ERROR(parse_safetensors(bytes_overflow.data(), bytes_overflow.size()), "overflows");
    // Empty, but its strides would overflow.
    const Bytes empty = one_tensor(
        "{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296],\"data_offsets\":[0,0]}", 0);
    CHECK_IO_ERROR(parse_safetensors(empty.data(), empty.size()), "overflows");
  }
  SUBCASE("size disagrees with shape and dtype") {
    const Bytes b = one_tensor("{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}", 4);
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "needs 8");
  }
  SUBCASE("malformed, reversed and out-of-bounds offsets") {
    const Bytes three = one_tensor("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}", 1);
    CHECK_IO_ERROR(parse_safetensors(three.data(), three.size()), "[begin, end]");
    const Bytes negative = one_tensor("{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}", 1);
    CHECK_IO_ERROR(parse_safetensors(negative.data(), negative.size()), "[begin, end]");
    const Bytes reversed = one_tensor("{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[1,0]}", 1);
    CHECK_IO_ERROR(parse_safetensors(reversed.data(), reversed.size()), "reversed");
    const Bytes beyond = one_tensor("{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}", 3);
    CHECK_IO_ERROR(parse_safetensors(beyond.data(), beyond.size()), "exceed the 3 data bytes");
  }
  SUBCASE("truncated data") {
    Bytes b = one_tensor("{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}", 16);
    b.resize(b.size() - 5);
    CHECK_IO_ERROR(parse_safetensors(b.data(), b.size()), "truncated");
  }
}

TEST_CASE("safetensors: offsets must tile the data exactly") {
  const auto two = [](const std::string& a, const std::string& b, size_t size) {
    return safetensors_bytes("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":" + a +
                                 "},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":" + b + "}}",
                             Bytes(size, 7));
  };
  const Bytes ok = two("[0,2]", "[2,4]", 4);
  CHECK(parse_safetensors(ok.data(), ok.size()).size() == 2);
  const Bytes overlap = two("[0,2]", "[1,3]", 4);
  CHECK_IO_ERROR(parse_safetensors(overlap.data(), overlap.size()), "overlaps tensor 'a'");
  const Bytes same = two("[0,2]", "[0,2]", 2);
  CHECK_IO_ERROR(parse_safetensors(same.data(), same.size()), "overlaps");
  const Bytes hole = two("[0,2]", "[3,5]", 5);
  CHECK_IO_ERROR(parse_safetensors(hole.data(), hole.size()), "hole of 1 bytes");
  const Bytes leading_hole = two("[1,3]", "[3,5]", 5);
  CHECK_IO_ERROR(parse_safetensors(leading_hole.data(), leading_hole.size()), "hole");
  const Bytes trailing = two("[0,2]", "[2,4]", 6);
  CHECK_IO_ERROR(parse_safetensors(trailing.data(), trailing.size()), "2 bytes after the last tensor");
}

TEST_CASE("safetensors: errors name the source and writer refuses reserved or invalid names") {
  const Bytes b = safetensors_bytes("nope", {});
  const std::string msg = io_test::io_error_message([&] { parse_safetensors(b.data(), b.size(), "model.st"); });
  CHECK(msg.rfind("model.st: ", 0) == 0);

  TensorFile reserved;
  reserved.add(io_test::make_tensor("__metadata__", DType::kU8, {1}));
  CHECK_IO_ERROR(serialize_safetensors(reserved), "reserved");
  TensorFile bad_utf8;
  bad_utf8.add(io_test::make_tensor("\xff\xfe", DType::kU8, {1}));
  CHECK_IO_ERROR(serialize_safetensors(bad_utf8), "UTF-8");
}
