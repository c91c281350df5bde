// The path-based entry points: format detection by content and extension, and file handling.
#include "io/io_test_support.h"

using dashattn::DType;
using dashattn::io::FileFormat;
using dashattn::io::read_tensor_file;
using dashattn::io::Tensor;
using dashattn::io::TensorFile;
using dashattn::io::write_tensor_file;
using io_test::TempPath;

namespace {

TensorFile mixed_file() {
  TensorFile f;
  f.add(io_test::make_tensor("q", DType::kF32, {1, 4, 2, 8}));
  f.add(io_test::make_tensor("cu_seqlens", DType::kI32, {3}));
  f.add(io_test::make_tensor("scale", DType::kF64, {}));
  return f;
}

}  // namespace

TEST_CASE("dispatch: formats from extensions and magic bytes") {
  FileFormat f{};
  CHECK(dashattn::io::format_from_extension("a/b/model.SafeTensors", &f));
  CHECK(f == FileFormat::kSafetensors);
  CHECK(dashattn::io::format_from_extension("x.npy", &f));
  CHECK(f == FileFormat::kNpy);
  CHECK(dashattn::io::format_from_extension("x.npz", &f));
  CHECK(f == FileFormat::kNpz);
  CHECK_FALSE(dashattn::io::format_from_extension("x.bin", &f));
  CHECK_FALSE(dashattn::io::format_from_extension("npy", &f));

  const io_test::Bytes npy = dashattn::io::serialize_npy(io_test::make_tensor("x", DType::kU8, {1}));
  CHECK(dashattn::io::format_from_magic(npy.data(), npy.size(), &f));
  CHECK(f == FileFormat::kNpy);
  const io_test::Bytes npz = dashattn::io::serialize_npz(TensorFile{});
  CHECK(dashattn::io::format_from_magic(npz.data(), npz.size(), &f));
  CHECK(f == FileFormat::kNpz);
  const io_test::Bytes st = dashattn::io::serialize_safetensors(TensorFile{});
  CHECK(dashattn::io::format_from_magic(st.data(), st.size(), &f));
  CHECK(f == FileFormat::kSafetensors);
  CHECK_FALSE(dashattn::io::format_from_magic(st.data(), 8, &f));
  CHECK(std::string(dashattn::io::file_format_name(FileFormat::kNpz)) == "npz");
}

TEST_CASE("dispatch: write then read through files, in every format") {
  TempPath st("a.safetensors"), npz("a.npz"), npy("values.npy");
  TensorFile f = mixed_file();
  f.metadata["format"] = "dashattn";
  write_tensor_file(st.str(), f);
  const TensorFile st_back = read_tensor_file(st.str());
  CHECK(st_back.metadata == f.metadata);
  for (const Tensor& t : f) CHECK(st_back.at(t.name()) == t);
  CHECK(dashattn::io::read_safetensors(st.str()) == st_back);

  f.metadata.clear();  // the NumPy formats have none
  write_tensor_file(npz.str(), f);
  CHECK(read_tensor_file(npz.str()) == f);
  CHECK(dashattn::io::read_npz(npz.str()) == f);

  TensorFile one;
  one.add(io_test::make_tensor("ignored", DType::kF16, {2, 2}));
  write_tensor_file(npy.str(), one);
  const TensorFile npy_back = read_tensor_file(npy.str());
  REQUIRE(npy_back.size() == 1);
  CHECK(npy_back.tensors()[0].name() == "io_test_tmp_values");  // named after the file
  CHECK(npy_back.tensors()[0].bytes() == one.tensors()[0].bytes());
  CHECK(dashattn::io::read_npy(npy.str()).name() == "io_test_tmp_values");
}

TEST_CASE("dispatch: content decides, and a contradicting extension is an error") {
  TempPath st_as_bin("weights.bin"), npy_as_npz("x.npz"), junk("junk.dat"), junk_npy("junk.npy");
  dashattn::io::write_safetensors(st_as_bin.str(), mixed_file());
  CHECK(read_tensor_file(st_as_bin.str()).size() == 3);

  dashattn::io::write_npy(npy_as_npz.str(), io_test::make_tensor("x", DType::kU8, {1}));
  CHECK_IO_ERROR(read_tensor_file(npy_as_npz.str()), "extension says npz but the content is npy");

  io_test::write_bytes(junk.str(), io_test::bytes_of("hello"));
  CHECK_IO_ERROR(read_tensor_file(junk.str()), "unrecognised format");
  io_test::write_bytes(junk_npy.str(), io_test::bytes_of("hello, this is not numpy"));
  CHECK_IO_ERROR(read_tensor_file(junk_npy.str()), "bad magic");
}

TEST_CASE("dispatch: missing files, directories and unwritable targets") {
  CHECK_IO_ERROR(read_tensor_file("does/not/exist.npy"), "cannot open");
  CHECK_IO_ERROR(read_tensor_file("."), "not a regular file");
  CHECK_IO_ERROR(write_tensor_file("no/such/dir/x.npz", mixed_file()), "cannot create");
  CHECK_IO_ERROR(write_tensor_file("x.txt", mixed_file()), "extension");
  TempPath npy("two.npy");
  CHECK_IO_ERROR(write_tensor_file(npy.str(), mixed_file()), "exactly one tensor");
}

TEST_CASE("dispatch: a refused write leaves an existing file untouched") {
  TempPath path("keep.npz");
  TensorFile good;
  good.add(io_test::make_tensor("a", DType::kU8, {3}));
  write_tensor_file(path.str(), good);
  const io_test::Bytes before = io_test::read_bytes(path.str());
  TensorFile bad = good;
  bad.add(io_test::make_tensor("b", DType::kBF16, {3}));
  CHECK_IO_ERROR(write_tensor_file(path.str(), bad), "bf16");
  CHECK(io_test::read_bytes(path.str()) == before);
}
