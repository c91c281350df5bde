// Bad input never crashes the tool: usage errors exit 2, invalid values 3, unavailable backends 4, I/O errors 5,
// each with "error: ..." on stderr naming what was wrong.
#include <doctest/doctest.h>

#include <fstream>

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
}
