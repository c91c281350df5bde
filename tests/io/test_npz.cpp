// .npz: archives as numpy.savez / savez_compressed write them, every malformed-zip class, and round trips.
#include <cstring>

#include "io/io_test_support.h"

#if defined(DASHATTN_TEST_HAVE_ZLIB)
#include <zlib.h>
#endif

using dashattn::DType;
using dashattn::io::parse_npz;
using dashattn::io::serialize_npz;
using dashattn::io::serialize_npy;
using dashattn::io::Tensor;
using dashattn::io::TensorFile;
using io_test::build_zip;
using io_test::Bytes;
using io_test::stored_member;
using io_test::ZipMemberSpec;

namespace {

TensorFile sample_file() {
  TensorFile f;
  f.add(io_test::make_tensor("q", DType::kF32, {2, 3}, 1));
  f.add(io_test::make_tensor("lens", DType::kI32, {4}, 2));
  return f;
}

std::vector<ZipMemberSpec> sample_members(bool numpy_style) {
  std::vector<ZipMemberSpec> members;
  for (const Tensor& t : sample_file()) {
    ZipMemberSpec m = stored_member(t.name() + ".npy", serialize_npy(t));
    m.numpy_zip64_local = numpy_style;
    members.push_back(m);
  }
  return members;
}

// A deflate stream made of one stored block (BFINAL=1, BTYPE=00): valid method-8 data built without a compressor.
Bytes deflate_stored_block(const Bytes& data) {
  Bytes out = {0x01};
  io_test::put_le(out, data.size(), 2);
  io_test::put_le(out, ~data.size() & 0xffffu, 2);
  return io_test::concat(out, data);
}

ZipMemberSpec deflated_member(const std::string& name, const Bytes& data, Bytes deflated) {
  ZipMemberSpec m = stored_member(name, data);
  m.method = 8;
  m.payload = std::move(deflated);
  return m;
}

uint32_t directory_offset(const Bytes& zip) {
  const size_t end = zip.size() - 22;
  return static_cast<uint32_t>(zip[end + 16] | (zip[end + 17] << 8) | (zip[end + 18] << 16) | (zip[end + 19] << 24));
}

void poke32(Bytes& b, size_t at, uint32_t value) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(value >> (8 * i));
}

}  // namespace

TEST_CASE("npz: reads numpy.savez archives (zip64 sizes in every local header)") {
  for (bool numpy_style : {true, false}) {
    const Bytes zip = build_zip(sample_members(numpy_style));
    const TensorFile f = parse_npz(zip.data(), zip.size());
    CHECK(f == sample_file());
  }
  const Bytes empty = build_zip({});
  CHECK(parse_npz(empty.data(), empty.size()).empty());
}

TEST_CASE("npz: deflated members (numpy.savez_compressed) are inflated when zlib is built in") {
  const Tensor t = io_test::make_tensor("k", DType::kF16, {3, 5});
  const Bytes npy = serialize_npy(t);
  const Bytes zip = build_zip({deflated_member("k.npy", npy, deflate_stored_block(npy))});
  if (!dashattn::io::compressed_npz_supported()) {
    CHECK_IO_ERROR(parse_npz(zip.data(), zip.size()), "compressed npz");
    return;
  }
  CHECK(parse_npz(zip.data(), zip.size()).at("k") == t);

  SUBCASE("declared size larger than the stream") {
    ZipMemberSpec m = deflated_member("k.npy", npy, deflate_stored_block(npy));
    m.uncompressed_size += 1;
    const Bytes b = build_zip({m});
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "fewer than the declared");
  }
  SUBCASE("declared size smaller than the stream") {
    ZipMemberSpec m = deflated_member("k.npy", npy, deflate_stored_block(npy));
    m.uncompressed_size -= 1;
    const Bytes b = build_zip({m});
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "more than the declared");
  }
  SUBCASE("corrupt stream") {
    Bytes bad = deflate_stored_block(npy);
    bad[0] = 0x07;  // reserved block type 11
    const Bytes b = build_zip({deflated_member("k.npy", npy, bad)});
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "corrupt");
  }
  SUBCASE("impossible compression ratio") {
    ZipMemberSpec m = deflated_member("k.npy", npy, Bytes{0x03, 0x00});
    m.uncompressed_size = 100'000'000;
    const Bytes b = build_zip({m});
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "impossible");
  }
#if defined(DASHATTN_TEST_HAVE_ZLIB)
  SUBCASE("real compression, as zlib's deflate (which numpy uses) writes it") {
    Bytes compressed(compressBound(npy.size()) + 64);
    z_stream zs{};
    REQUIRE(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    zs.next_in = const_cast<Bytes::value_type*>(npy.data());
    zs.avail_in = static_cast<uInt>(npy.size());
    zs.next_out = compressed.data();
    zs.avail_out = static_cast<uInt>(compressed.size());
    REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
    compressed.resize(zs.total_out);
    deflateEnd(&zs);
    CHECK(compressed.size() < npy.size());
    const Bytes b = build_zip({deflated_member("k.npy", npy, compressed)});
    CHECK(parse_npz(b.data(), b.size()).at("k") == t);
  }
#endif
}

TEST_CASE("npz: writer emits a plain stored archive that reads back, for every dtype and rank") {
  const std::vector<std::vector<int64_t>> shapes = {{}, {3}, {2, 3}, {2, 1, 3}, {1, 2, 3, 2}, {0, 2}};
  TensorFile f;
  int index = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kF64, DType::kI32, DType::kU32, DType::kU8}) {
    for (const auto& shape : shapes) {
      f.add(io_test::make_tensor("t" + std::to_string(index), dtype, shape, static_cast<uint8_t>(index)));
      ++index;
    }
  }
  const Bytes zip = serialize_npz(f);
  CHECK(parse_npz(zip.data(), zip.size()) == f);
  // The first member: local header signature, stored, its name, then exactly the .npy bytes.
  CHECK(zip[0] == 'P');
  CHECK(zip[1] == 'K');
  CHECK(zip[8] == 0);
  CHECK(std::string(zip.begin() + 30, zip.begin() + 36) == "t0.npy");
  const Bytes npy = serialize_npy(f.at("t0"));
  CHECK(Bytes(zip.begin() + 36, zip.begin() + 36 + npy.size()) == npy);
  CHECK(io_test::reference_crc32(npy) == (zip[14] | (zip[15] << 8) | (zip[16] << 16) | (uint32_t(zip[17]) << 24)));
  CHECK(serialize_npz(TensorFile{}) == build_zip({}));
}

TEST_CASE("npz: writer refuses bf16 and names that are not plain member names") {
  TensorFile bf16;
  bf16.add(io_test::make_tensor("w", DType::kBF16, {2}));
  CHECK_IO_ERROR(serialize_npz(bf16), "safetensors");
  for (const char* name : {"", "a/b", "../b", "a\\b", "tab\there"}) {
    TensorFile f;
    f.add(io_test::make_tensor(name, DType::kU8, {1}));
    CHECK_IO_ERROR(serialize_npz(f), "member name");
  }
}

TEST_CASE("npz: writer refuses archives that would need zip64") {
  TensorFile many;
  for (int i = 0; i < 0x10000; ++i) many.add(Tensor("t" + std::to_string(i), DType::kU8, {0}));
  CHECK_IO_ERROR(serialize_npz(many), "zip64");
}

TEST_CASE("npz: archive structure problems") {
  const Bytes good = build_zip(sample_members(false));
  const uint32_t dir = directory_offset(good);
  SUBCASE("not a zip archive, or truncated") {
    const Bytes junk = io_test::bytes_of("this is not a zip archive at all");
    CHECK_IO_ERROR(parse_npz(junk.data(), junk.size()), "end-of-central-directory");
    CHECK_IO_ERROR(parse_npz(good.data(), good.size() - 1), "end-of-central-directory");
    CHECK_IO_ERROR(parse_npz(good.data(), 10), "too short");
  }
  SUBCASE("bad central directory signature") {
    Bytes b = good;
    b[dir] = 'X';
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "bad central directory entry 0");
  }
  SUBCASE("bad local header signature") {
    Bytes b = good;
    b[2] = 9;
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "bad local header signature");
  }
  SUBCASE("local header offset beyond the file") {
    Bytes b = good;
    poke32(b, dir + 42, 0x7fffffff);
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "beyond the member area");
  }
  SUBCASE("central directory offset beyond the file") {
    Bytes b = good;
    poke32(b, b.size() - 22 + 16, 0x10000000);
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "disagree with the end record");
  }
  SUBCASE("entry count larger than the directory") {
    Bytes b = good;
    b[b.size() - 22 + 8] = 3;
    b[b.size() - 22 + 10] = 3;
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "bad central directory entry 2");
  }
  SUBCASE("stored sizes disagree") {
    Bytes b = good;
    poke32(b, dir + 20, 1);
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "sizes disagree");
  }
  SUBCASE("local and central sizes disagree") {
    std::vector<ZipMemberSpec> m = sample_members(false);
    Bytes b = build_zip(m);
    poke32(b, 18, static_cast<uint32_t>(m[0].payload.size() - 1));
    poke32(b, 22, static_cast<uint32_t>(m[0].payload.size() - 1));
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "disagree with the central directory");
  }
  SUBCASE("CRC mismatch") {
    std::vector<ZipMemberSpec> m = sample_members(true);
    m[1].payload.back() ^= 1;
    const Bytes b = build_zip(m);
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "lens.npy: CRC-32 mismatch");
  }
  SUBCASE("members overlap") {
    // Grow the first member (local and central sizes agree) so that it swallows the second's local header.
    std::vector<ZipMemberSpec> m = sample_members(false);
    Bytes b = build_zip(m);
    const uint32_t grown = static_cast<uint32_t>(m[0].payload.size() + 10);
    poke32(b, 18, grown);
    poke32(b, 22, grown);
    poke32(b, dir + 20, grown);
    poke32(b, dir + 24, grown);
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "members overlap");
  }
  SUBCASE("zip64 end records and size markers") {
    Bytes b = good;
    b[b.size() - 22 + 10] = 0xff;
    b[b.size() - 22 + 11] = 0xff;
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "zip64");
    Bytes sizes = good;
    poke32(sizes, dir + 24, 0xffffffffu);
    CHECK_IO_ERROR(parse_npz(sizes.data(), sizes.size()), "zip64");
    Bytes locator = good;
    Bytes fake = {0x50, 0x4b, 0x06, 0x07};
    fake.resize(20, 0);
    locator.insert(locator.end() - 22, fake.begin(), fake.end());
    CHECK_IO_ERROR(parse_npz(locator.data(), locator.size()), "zip64");
  }
  SUBCASE("encryption and unknown compression methods") {
    Bytes encrypted = good;
    encrypted[dir + 8] = 1;
    CHECK_IO_ERROR(parse_npz(encrypted.data(), encrypted.size()), "encrypted");
    std::vector<ZipMemberSpec> m = sample_members(false);
    m[0].method = 12;
    const Bytes bzip2 = build_zip(m);
    CHECK_IO_ERROR(parse_npz(bzip2.data(), bzip2.size()), "compression method 12");
  }
  SUBCASE("local header names a different member") {
    Bytes b = good;
    b[30] = 'z';
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), "names a different member");
  }
}

TEST_CASE("npz: member names") {
  const Bytes npy = serialize_npy(io_test::make_tensor("x", DType::kU8, {1}));
  const auto name_error = [&](const std::string& name, const std::string& needle) {
    const Bytes b = build_zip({stored_member(name, npy)});
    CHECK_IO_ERROR(parse_npz(b.data(), b.size()), needle);
  };
  name_error("../x.npy", "'..' component");
  name_error("a/../../x.npy", "'..' component");
  name_error("..", "'..' component");
  name_error("/etc/x.npy", "path separator");
  name_error("dir/x.npy", "path separator");
  name_error("dir\\x.npy", "path separator");
  name_error("", "empty member name");
  name_error("x\n.npy", "control characters");
  name_error("notes.txt", "not a .npy file");
  name_error(".npy", "not a .npy file");
  const Bytes duplicate = build_zip({stored_member("x.npy", npy), stored_member("x.npy", npy)});
  CHECK_IO_ERROR(parse_npz(duplicate.data(), duplicate.size()), "duplicate member name 'x.npy'");
}

TEST_CASE("npz: a bad .npy inside names the archive and the member") {
  Bytes npy = serialize_npy(io_test::make_tensor("x", DType::kF32, {2}));
  npy[0] = 0;
  const Bytes b = build_zip({stored_member("x.npy", npy)});
  const std::string msg = io_test::io_error_message([&] { parse_npz(b.data(), b.size(), "batch.npz"); });
  CHECK(msg.rfind("batch.npz:x.npy: bad magic", 0) == 0);
}
