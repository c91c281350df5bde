// run, inspect and decode over tensor files written here with dashattn::io.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "cli_runner.h"
#include "dashattn/dashattn.h"
#include "dashattn/io/tensor_file.h"
#include "dashattn/synthetic.h"

using dashattn_test::run_cli;
using dashattn_test::scratch_path;
namespace io = dashattn::io;
namespace synthetic = dashattn::synthetic;
using dashattn::DType;

namespace {

synthetic::Problem small_problem(int64_t n = 320) {
  synthetic::Config c;
  c.n = n;
  c.h_q = 4;
  c.h_kv = 2;
  c.d = 64;
  c.num_needles = 2;
  c.needle_queries = 16;
  c.seed = 7;
  return synthetic::generate(c);
}

io::Tensor float_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  return io::Tensor(name, DType::kF32, std::move(shape), synthetic::convert(v, DType::kF32));
}

// [b, n, h, d] -> [b, h, n, d]
std::vector<float> to_bhnd(const std::vector<float>& x, int64_t b, int64_t n, int64_t h, int64_t d) {
  std::vector<float> out(x.size());
  for (int64_t s = 0; s < b; ++s)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < h; ++j)
        std::memcpy(&out[static_cast<size_t>(((s * h + j) * n + i) * d)], &x[static_cast<size_t>(((s * n + i) * h + j) * d)],
                    static_cast<size_t>(d) * sizeof(float));
  return out;
}

std::string write_problem(const synthetic::Problem& p, const std::string& name, bool bhnd = false) {
  const auto& c = p.config;
  io::TensorFile f;
  if (bhnd) {
    f.add(float_tensor("q", {c.batch, c.h_q, c.n, c.d}, to_bhnd(p.q, c.batch, c.n, c.h_q, c.d)));
    f.add(float_tensor("k", {c.batch, c.h_kv, c.n, c.d}, to_bhnd(p.k, c.batch, c.n, c.h_kv, c.d)));
    f.add(float_tensor("v", {c.batch, c.h_kv, c.n, c.d}, to_bhnd(p.v, c.batch, c.n, c.h_kv, c.d)));
  } else {
    f.add(float_tensor("q", {c.batch, c.n, c.h_q, c.d}, p.q));
    f.add(float_tensor("k", {c.batch, c.n, c.h_kv, c.d}, p.k));
    f.add(float_tensor("v", {c.batch, c.n, c.h_kv, c.d}, p.v));
  }
  f.add(float_tensor("summary_query", {c.h_kv * c.d}, p.summary_query));  // the flat checkpoint layout
  const std::string path = scratch_path(name);
  io::write_tensor_file(path, f);
  return path;
}

// The same forward through the library, for comparison with what the tool wrote.
std::vector<float> library_forward(synthetic::Problem& p) {
  auto& be = dashattn::Registry::instance().select("cpu");
  std::vector<float> o(p.q.size());
  dashattn::ForwardParams fp;
  fp.q = p.q_view();
  fp.k = p.k_view();
  fp.v = p.v_view();
  fp.summary_query = p.summary_query_view();
  fp.o = dashattn::make_view(o.data(), DType::kF32, {p.config.batch, p.config.n, p.config.h_q, p.config.d});
  dashattn::forward(be, fp);
  return o;
}

double max_abs_diff(const io::Tensor& t, const std::vector<float>& ref) {
  REQUIRE(t.dtype() == DType::kF32);
  REQUIRE(static_cast<size_t>(t.numel()) == ref.size());
  const float* x = reinterpret_cast<const float*>(t.data());
  double m = 0;
  for (size_t i = 0; i < ref.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(x[i]) - ref[i]));
  return m;
}

}  // namespace

TEST_CASE("run writes o, lse, mask and statistics that match the library") {
  synthetic::Problem p = small_problem();
  const std::string in = write_problem(p, "problem.safetensors");
  const std::string out = scratch_path("out.safetensors");
  const std::string png = scratch_path("run.png");
  const auto r = run_cli({"run", "--input", in, "--output", out, "--backend", "cpu", "--plot", png});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("sparsity") != std::string::npos);

  const io::TensorFile f = io::read_tensor_file(out);
  const io::Tensor& o = f.at("o");
  CHECK(o.shape() == std::vector<int64_t>{1, 320, 4, 64});
  CHECK(max_abs_diff(o, library_forward(p)) == 0.0);  // same backend, same call: bitwise
  CHECK(f.at("lse").dtype() == DType::kF32);
  CHECK(f.at("lse").shape() == std::vector<int64_t>{1, 4, 320});
  CHECK(f.at("mask").dtype() == DType::kU32);
  CHECK(f.at("mask").shape() == std::vector<int64_t>{1, 2, 320, 1});
  CHECK(f.at("active_chunks").dtype() == DType::kI32);
  REQUIRE(f.metadata.count("dashattn") == 1);
  const auto meta = nlohmann::json::parse(f.metadata.at("dashattn"));
  CHECK(meta["stats"]["sparsity"].get<double>() >= 0.0);
  CHECK(meta["method"]["chunk"] == 64);
  CHECK(meta["backend"] == "cpu");

  // The diagonal bit of every query is set.
  const uint32_t* mask = reinterpret_cast<const uint32_t*>(f.at("mask").data());
  for (int64_t i = 0; i < 320; ++i) CHECK(((mask[i] >> (i / 64)) & 1u) == 1u);

  std::ifstream plot(png, std::ios::binary);
  CHECK(plot.good());
}

TEST_CASE("inspect lists what run wrote") {
  synthetic::Problem p = small_problem();
  const std::string in = write_problem(p, "inspect_in.safetensors");
  const std::string out = scratch_path("inspect_out.safetensors");
  REQUIRE(run_cli({"run", "-i", in, "-o", out}).exit_code == 0);

  const auto text = run_cli({"inspect", out});
  REQUIRE_MESSAGE(text.exit_code == 0, text.err);
  for (const char* s : {"o", "lse", "mask", "active_chunks", "u32", "i32", "[1, 320, 4, 64]", "metadata"}) {
    CHECK_MESSAGE(text.out.find(s) != std::string::npos, s);
  }
  const auto r = run_cli({"inspect", in, "--json"});
  REQUIRE(r.exit_code == 0);
  const auto j = r.json();
  REQUIRE(j["tensors"].size() == 4);
  CHECK(j["tensors"][0]["name"] == "q");
  CHECK(j["tensors"][0]["dtype"] == "f32");
  CHECK(j["tensors"][0]["bytes"] == 320 * 4 * 64 * 4);
  CHECK(j["format"] == "safetensors");
}

TEST_CASE("run in bhnd layout gives the same output, laid out bhnd") {
  synthetic::Problem p = small_problem();
  const std::string in = write_problem(p, "bhnd.safetensors", true);
  const std::string out = scratch_path("bhnd_out.safetensors");
  const auto r = run_cli({"run", "--input", in, "--layout", "bhnd", "--output", out});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const io::TensorFile f = io::read_tensor_file(out);
  CHECK(f.at("o").shape() == std::vector<int64_t>{1, 4, 320, 64});
  CHECK(max_abs_diff(f.at("o"), to_bhnd(library_forward(p), 1, 320, 4, 64)) == 0.0);
}

TEST_CASE("run to .npz writes a JSON sidecar and converts bf16 output") {
  synthetic::Problem p = small_problem();
  const std::string in = write_problem(p, "npz_in.safetensors");
  const std::string out = scratch_path("out.npz");
  const auto r = run_cli({"run", "--input", in, "--output", out, "--dtype", "bf16", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const io::TensorFile f = io::read_tensor_file(out);
  CHECK(f.at("o").dtype() == DType::kF32);
  std::ifstream sidecar(out + ".json");
  REQUIRE(sidecar.good());
  const auto meta = nlohmann::json::parse(sidecar);
  CHECK(meta["problem"]["dtype"] == "bf16");
  CHECK(r.json()["stats_file"] == out + ".json");
}

TEST_CASE("decode replays a prompt and agrees with prefill") {
  synthetic::Problem p = small_problem(300);
  const std::string in = write_problem(p, "decode.safetensors");
  for (const char* tokens : {"1", "7"}) {
    const auto r = run_cli({"decode", "--input", in, "--prompt-len", "100", "--tokens-per-step", tokens,
                            "--chunk", "32", "--json"});
    REQUIRE_MESSAGE(r.exit_code == 0, (r.out + r.err));
    const auto j = r.json();
    CHECK(j["agree"].get<bool>());
    CHECK(j["mask_rows_differing"] == 0);
    CHECK(j["max_abs_difference"].get<double>() <= j["tolerance"].get<double>());
    CHECK(j["steps"].get<int>() == 200 / std::stoi(tokens));
  }
  const std::string out = scratch_path("decoded.safetensors");
  const auto r = run_cli({"decode", "--input", in, "--prompt-len", "250", "--steps", "10", "--output", out});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("agree") != std::string::npos);
  CHECK(io::read_tensor_file(out).at("o").shape() == std::vector<int64_t>{1, 260, 4, 64});
}

TEST_CASE("decode with a paged K/V cache agrees with prefill and with the contiguous decoder") {
  synthetic::Problem p = small_problem(300);
  const std::string in = write_problem(p, "decode_paged.safetensors");
  const std::string flat_out = scratch_path("decoded_flat.safetensors"), paged_out = scratch_path("decoded_paged.safetensors");
  const auto flat = run_cli({"decode", "--input", in, "--prompt-len", "70", "--tokens-per-step", "3", "--chunk", "32",
                             "--output", flat_out, "--json"});
  REQUIRE_MESSAGE(flat.exit_code == 0, (flat.out + flat.err));
  CHECK(flat.json()["page_size"] == 0);
  const auto r = run_cli({"decode", "--input", in, "--prompt-len", "70", "--tokens-per-step", "3", "--chunk", "32",
                          "--page-size", "64", "--output", paged_out, "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, (r.out + r.err));
  const auto j = r.json();
  CHECK(j["agree"].get<bool>());
  CHECK(j["mask_rows_differing"] == 0);
  CHECK(j["page_size"] == 64);
  CHECK(j["pages"].get<int64_t>() >= 5);  // 300 keys in 64-key pages
  // The paged cache holds the same keys: the decoded outputs are the contiguous decoder's, bit for bit.
  const io::Tensor a = io::read_tensor_file(flat_out).at("o"), b = io::read_tensor_file(paged_out).at("o");
  REQUIRE(a.nbytes() == b.nbytes());
  CHECK(std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
  const auto text = run_cli({"decode", "--input", in, "--prompt-len", "70", "--chunk", "32", "--page-size", "128"});
  REQUIRE_MESSAGE(text.exit_code == 0, text.err);
  CHECK(text.out.find("pages of 128 keys") != std::string::npos);
}

TEST_CASE("verify accepts a given input file") {
  synthetic::Problem p = small_problem();
  const std::string in = write_problem(p, "verify_in.safetensors");
  const auto r = run_cli({"verify", "--input", in, "--backend", "cpu", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, (r.out + r.err));
  CHECK(r.json()["results"].size() == 1);
  CHECK(r.json()["passed"].get<bool>());
}
