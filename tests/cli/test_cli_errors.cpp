// Bad input never crashes the tool: usage errors exit 2, invalid values 3, unavailable backends 4, I/O errors 5,
// each with "error: ..." on stderr naming what was wrong.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "batch_files.h"
#include "cli_runner.h"
#include "dashattn/io/tensor_file.h"

using dashattn_test::run_cli;
using dashattn_test::scratch_path;

namespace {

void check_error(const dashattn_test::CliResult& r, int code, const std::string& mention) {
  CHECK_MESSAGE(r.exit_code == code, r.err);
  CHECK_MESSAGE(r.err.rfind("error: ", 0) == 0, r.err);
  CHECK_MESSAGE(r.err.find(mention) != std::string::npos, "stderr '" << r.err << "' should mention " << mention);
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = scratch_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST_CASE("usage errors exit with 2") {
  check_error(run_cli({"demo", "--n", "abc"}), 2, "--n");
  check_error(run_cli({"demo", "--prior", "bogus"}), 2, "--prior");
  check_error(run_cli({"demo", "--backend", "tpu"}), 2, "--backend");
  check_error(run_cli({"demo", "--no-such-flag"}), 2, "--no-such-flag");
  check_error(run_cli({"frobnicate"}), 2, "frobnicate");
  check_error(run_cli({"run", "--output", scratch_path("x.safetensors")}), 2, "--input");
  check_error(run_cli({"run", "--input", "a.safetensors", "--output", scratch_path("x.npy")}), 2, "--output");
  CHECK(run_cli({}).exit_code == 2);  // a subcommand is required
}

TEST_CASE("invalid values exit with 3 and name the argument") {
  check_error(run_cli({"demo", "--alpha", "0.5"}), 3, "alpha");
  check_error(run_cli({"demo", "--sigma", "0"}), 3, "sigma");
  check_error(run_cli({"demo", "--hq", "3", "--hkv", "2"}), 3, "h_q");
  check_error(run_cli({"demo", "--n", "128", "--needles", "9"}), 3, "num_needles");
  check_error(run_cli({"bench", "--sparsity", "1.5", "--n", "256"}), 3, "--sparsity");
}

TEST_CASE("an unavailable backend exits with 4") {
  // hip is never available on the test machines (not compiled, or no AMD GPU).
  const auto r = run_cli({"demo", "--backend", "hip", "--n", "256"});
  check_error(r, 4, "hip");
  // The environment variable is read when the flag is absent.
  check_error(run_cli({"demo", "--n", "256"}, {"DASHATTN_BACKEND=hip"}), 4, "hip");
}

TEST_CASE("missing and corrupted files exit with 5") {
  check_error(run_cli({"inspect", scratch_path("does_not_exist.safetensors")}), 5, "does_not_exist");

  // A safetensors header length far past the end of the file.
  const std::string huge = write_bytes("corrupt.safetensors", std::string("\xff\xff\xff\x0f\x00\x00\x00\x00{}", 10));
  check_error(run_cli({"inspect", huge}), 5, "corrupt.safetensors");
  check_error(run_cli({"run", "--input", huge, "--output", scratch_path("never.safetensors")}), 5,
              "corrupt.safetensors");

  // A valid file cut short: the tensor data is missing.
  dashattn::io::TensorFile f;
  f.add(dashattn::io::Tensor("q", dashattn::DType::kF32, {1, 64, 2, 64}));
  const std::vector<uint8_t> bytes = dashattn::io::serialize_safetensors(f);
  const std::string cut = write_bytes("truncated.safetensors", std::string(bytes.begin(), bytes.begin() + 200));
  check_error(run_cli({"decode", "--input", cut, "--prompt-len", "1"}), 5, "truncated.safetensors");

  check_error(run_cli({"inspect", write_bytes("garbage.npz", "this is not a tensor file at all")}), 5, "garbage");
}

TEST_CASE("a tensor missing from the input exits with 3 and names it") {
  dashattn::io::TensorFile f;
  f.add(dashattn::io::Tensor("q", dashattn::DType::kF32, {1, 64, 2, 64}));
  f.add(dashattn::io::Tensor("k", dashattn::DType::kF32, {1, 64, 2, 64}));
  f.add(dashattn::io::Tensor("v", dashattn::DType::kF32, {1, 64, 2, 64}));
  const std::string path = scratch_path("qkv_only.safetensors");
  dashattn::io::write_tensor_file(path, f);
  check_error(run_cli({"run", "-i", path, "-o", scratch_path("o.safetensors"), "--q", "queries"}), 3, "queries");
  check_error(run_cli({"run", "-i", path, "-o", scratch_path("o.safetensors"), "--summary-query", "sq"}), 3, "sq");
  check_error(run_cli({"decode", "-i", path, "--prompt-len", "65"}), 3, "--prompt-len");
  check_error(run_cli({"decode", "-i", path, "--prompt-len", "10", "--steps", "100"}), 3, "--steps");
  check_error(run_cli({"decode", "-i", path, "--prompt-len", "10", "--page-size", "100"}), 3, "--page-size");
  check_error(run_cli({"decode", "-i", path, "--prompt-len", "10", "--page-size", "64", "--chunk", "128"}), 3,
              "--page-size");
  check_error(run_cli({"decode", "-i", path, "--prompt-len", "10", "--page-size", "-64"}), 3, "--page-size");
}

namespace {

dashattn::io::Tensor int_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return dashattn::io::Tensor(name, dashattn::DType::kI32, std::move(shape), std::move(bytes));
}

// run on f (written under name) must fail with code and mention every string of mentions.
void check_run_error(const dashattn::io::TensorFile& f, const std::string& name, int code,
                     const std::vector<std::string>& mentions, const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args = {"run", "-i", dashattn_test::write_scratch(f, name + ".safetensors"), "-o",
                                   scratch_path(name + "_out.safetensors")};
  args.insert(args.end(), flags.begin(), flags.end());
  const auto r = run_cli(args);
  for (const std::string& m : mentions) check_error(r, code, m);
}

}  // namespace

TEST_CASE("a bad paged input exits with 3 naming the tensor and what was expected") {
  using dashattn::io::Tensor;
  const dashattn::io::TensorFile good = dashattn_test::paged_copy(dashattn_test::padded_batch(), 64, 1);
  const Tensor& table = good.at("block_table");  // [3, 6] over 15 pages: sequences of 320, 130 and 257 keys
  REQUIRE(table.shape() == std::vector<int64_t>{3, 6});
  const int64_t pages = good.at("k").shape()[0];

  auto with = [&](Tensor t) {
    dashattn::io::TensorFile f = good;
    f.set(std::move(t));
    return f;
  };
  std::vector<int32_t> entries(reinterpret_cast<const int32_t*>(table.data()),
                               reinterpret_cast<const int32_t*>(table.data()) + table.numel());

  // Not int32: the file's dtype and shape are named.
  check_run_error(with(Tensor("block_table", dashattn::DType::kF32, {3, 6})), "table_f32", 3,
                  {"--block-table (tensor 'block_table')", "expected int32 [3 sequences, >= 5 pages per sequence]",
                   "f32 [3, 6]"});
  check_run_error(with(int_tensor("block_table", {18}, entries)), "table_rank1", 3, {"block_table", "[18]"});
  check_run_error(with(int_tensor("block_table", {3, 4}, std::vector<int32_t>(entries.begin(), entries.begin() + 12))),
                  "table_narrow", 3, {"block_table", ">= 5 pages per sequence", "320 keys", "[3, 4]"});
  check_run_error(with(int_tensor("block_table", {2, 6}, std::vector<int32_t>(entries.begin(), entries.begin() + 12))),
                  "table_rows", 3, {"block_table", "3 sequences", "[2, 6]"});

  // An entry a sequence uses that is no page of the pool (checked on the host for every backend).
  std::vector<int32_t> bad = entries;
  bad[6 + 1] = static_cast<int32_t>(pages);
  check_run_error(with(int_tensor("block_table", {3, 6}, bad)), "table_range", 3,
                  {"block_table[1, 1]", "a page in [0, " + std::to_string(pages) + ")"});
  // Entries past a sequence's length are never read: -1 there is fine (the table holds -1 in its last column).
  CHECK(entries[5] == -1);

  // Page sizes the kernels cannot tile, and a chunk that would straddle pages.
  check_run_error(dashattn_test::paged_copy(dashattn_test::padded_batch(), 32, 1), "page32", 3,
                  {"k.shape[1] (page size)", "multiple of 64"});
  check_run_error(good, "page_vs_chunk", 3, {"k.shape[1] (page size)", "chunk_size = 128"}, {"--chunk", "128"});

  // k and v pools that disagree.
  const Tensor& v = good.at("v");
  std::vector<int64_t> fewer = v.shape();
  fewer[0] -= 1;
  check_run_error(with(Tensor("v", dashattn::DType::kF32, fewer)), "pools_disagree", 3, {"v.shape", "k.shape"});

  // A block table with no lengths, and lengths of the wrong type or size.
  check_run_error(dashattn_test::without(good, "seqlens_k"), "no_lengths", 3,
                  {"--block-table (tensor 'block_table')", "seqlens_k [b]", "without lengths"});
  check_run_error(with(Tensor("seqlens_k", dashattn::DType::kF32, {3})), "seqlens_f32", 3,
                  {"--seqlens-k (tensor 'seqlens_k')", "int32 [b = 3]"});
  check_run_error(with(int_tensor("seqlens_k", {2}, {64, 64})), "seqlens_short", 3, {"seqlens_k", "[2]"});

  // A packed batch needs both prefix sums.
  const dashattn::io::TensorFile packed = dashattn_test::paged_copy(dashattn_test::packed_batch(), 64, 1);
  check_run_error(dashattn_test::without(packed, "cu_seqlens_q"), "no_cu_q", 3, {"cu_seqlens_q", "missing"});
  check_run_error(dashattn_test::without(dashattn_test::without(packed, "cu_seqlens_q"), "cu_seqlens_k"),
                  "no_cu_at_all", 3, {"without lengths"});

  // A table named on the command line must exist; verify takes the same path; decode cannot replay a layout.
  check_run_error(good, "named_table", 3, {"engine_table"}, {"--block-table", "engine_table"});
  const std::string path =
      dashattn_test::write_scratch(with(int_tensor("block_table", {3, 6}, bad)), "verify_bad.safetensors");
  check_error(run_cli({"verify", "-i", path, "--backend", "cpu"}), 3, "block_table[1, 1]");
  check_error(run_cli({"decode", "-i", path, "--prompt-len", "10"}), 3, "--input");
}
