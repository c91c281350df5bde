// Paged K/V caches in input files: a block_table beside page pools k and v gives run exactly the outputs of the
// contiguous file it was paged from, and verify checks it against the reference on the gathered keys.
#include <doctest/doctest.h>

#include <string>

#include "batch_files.h"
#include "cli_runner.h"
#include "dashattn/io/tensor_file.h"

using dashattn_test::paged_copy;
using dashattn_test::run_cli;
using dashattn_test::scratch_path;
using dashattn_test::write_scratch;
namespace io = dashattn::io;

namespace {

struct Geometry {
  int64_t page_size;
  int chunk;
};

const Geometry kGeometries[] = {{64, 16}, {64, 64}, {256, 16}, {256, 64}};

io::TensorFile run_to_file(const std::string& input, int chunk, const std::string& output_name) {
  const std::string out = scratch_path(output_name);
  const auto r = run_cli({"run", "-i", input, "-o", out, "--backend", "cpu", "--chunk", std::to_string(chunk)});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return io::read_tensor_file(out);
}

// Every output of the paged run equals the contiguous run's, byte for byte, and verify passes on the paged file.
void check_paged_matches_contiguous(const io::TensorFile& contiguous, const std::string& name) {
  const std::string flat = write_scratch(contiguous, name + ".safetensors");
  for (const Geometry& g : kGeometries) {
    const std::string tag = name + "_P" + std::to_string(g.page_size) + "_C" + std::to_string(g.chunk);
    CAPTURE(tag);
    const std::string paged = write_scratch(paged_copy(contiguous, g.page_size, 5 + g.page_size), tag + ".safetensors");
    const io::TensorFile want = run_to_file(flat, g.chunk, tag + "_flat_out.safetensors");
    const io::TensorFile got = run_to_file(paged, g.chunk, tag + "_paged_out.safetensors");
    for (const char* t : {"o", "lse", "mask", "active_chunks"}) {
      CHECK_MESSAGE(got.at(t) == want.at(t), t);
    }
    const auto v = run_cli({"verify", "-i", paged, "--backend", "cpu", "--chunk", std::to_string(g.chunk), "--json"});
    CHECK_MESSAGE(v.exit_code == 0, (v.out + v.err));
    CHECK(v.json()["passed"].get<bool>());
  }
}

}  // namespace

TEST_CASE("a paged padded batch (seqlens_k) runs bit for bit like its contiguous file and verifies") {
  check_paged_matches_contiguous(dashattn_test::padded_batch(), "paged_padded");
}

TEST_CASE("a paged packed varlen batch (cu_seqlens) runs bit for bit like its contiguous file and verifies") {
  check_paged_matches_contiguous(dashattn_test::packed_batch(), "paged_packed");
}

TEST_CASE("contiguous batches with lengths verify, and packed outputs keep the packed rows") {
  for (const auto& [file, name] : {std::pair{dashattn_test::padded_batch(), "lengths_padded"},
                                   std::pair{dashattn_test::packed_batch(), "lengths_packed"}}) {
    CAPTURE(name);
    const std::string path = write_scratch(file, std::string(name) + ".safetensors");
    const auto v = run_cli({"verify", "-i", path, "--backend", "cpu", "--chunk", "32"});
    CHECK_MESSAGE(v.exit_code == 0, (v.out + v.err));
  }
  const std::string packed = write_scratch(dashattn_test::packed_batch(), "packed_shape.safetensors");
  const io::TensorFile out = run_to_file(packed, 64, "packed_out.safetensors");
  CHECK(out.at("o").shape() == std::vector<int64_t>{111, 4, 64});
  CHECK(out.at("lse").shape() == std::vector<int64_t>{1, 4, 111});
  CHECK(out.at("mask").shape() == std::vector<int64_t>{1, 2, 111, 1});
}

TEST_CASE("run, inspect and the JSON description name the page geometry") {
  const io::TensorFile paged = paged_copy(dashattn_test::padded_batch(), 64, 3);
  const int64_t pages = paged.at("k").shape()[0];
  const std::string path = write_scratch(paged, "described.safetensors");
  const auto r = run_cli({"run", "-i", path, "-o", scratch_path("described_out.safetensors"), "--backend", "cpu"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const std::string geometry = "paged: 64-key pages, " + std::to_string(pages) + " pages";
  CHECK_MESSAGE(r.out.find(geometry) != std::string::npos, r.out);

  const auto text = run_cli({"inspect", path});
  REQUIRE(text.exit_code == 0);
  CHECK_MESSAGE(text.out.find(geometry) != std::string::npos, text.out);
  const auto j = run_cli({"inspect", path, "--json"}).json();
  CHECK(j["paged"]["page_size"] == 64);
  CHECK(j["paged"]["pages"] == pages);
  CHECK(j["paged"]["sequences"] == 3);

  const auto js = run_cli({"run", "-i", path, "-o", scratch_path("described_json.safetensors"), "--json"}).json();
  CHECK(js["problem"]["paged"]["page_size"] == 64);
  CHECK(js["problem"]["n_k"] == 320);
}
