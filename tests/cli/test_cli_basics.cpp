// --help, --version, backends, demo, verify, bench: the subcommands that need no input file.
#include <doctest/doctest.h>

#include <fstream>

#include "cli_runner.h"
#include "dashattn/version.h"

using dashattn_test::run_cli;
using dashattn_test::scratch_path;

TEST_CASE("--help lists the subcommands and the exit codes") {
  const auto r = run_cli({"--help"});
  CHECK(r.exit_code == 0);
  for (const char* sub : {"demo", "run", "decode", "verify", "bench", "inspect", "backends"}) {
    CHECK_MESSAGE(r.out.find(sub) != std::string::npos, sub);
  }
  CHECK(r.out.find("Exit codes") != std::string::npos);
}

TEST_CASE("subcommand --help shows the method flags with their defaults") {
  const auto r = run_cli({"demo", "--help"});
  CHECK(r.exit_code == 0);
  for (const char* flag : {"--chunk", "--alpha", "--gamma", "--sigma", "--prior", "--scale", "--solver", "--backend",
                           "--json", "--plot", "--n", "--dtype"}) {
    CHECK_MESSAGE(r.out.find(flag) != std::string::npos, flag);
  }
  CHECK(r.out.find("estimate_diagonal") != std::string::npos);
  CHECK(r.out.find("4096") != std::string::npos);  // default n
  CHECK(r.out.find("1.5") != std::string::npos);   // default alpha
}

TEST_CASE("--version prints the version and the compiled backends") {
  const auto r = run_cli({"--version"});
  CHECK(r.exit_code == 0);
  CHECK(r.out.find(DASHATTN_VERSION_STRING) != std::string::npos);
  CHECK(r.out.find(DASHATTN_COMPILED_BACKENDS) != std::string::npos);
}

TEST_CASE("backends lists the CPU backend as available") {
  const auto text = run_cli({"backends"});
  CHECK(text.exit_code == 0);
  CHECK(text.out.find("cpu") != std::string::npos);

  const auto r = run_cli({"backends", "--json"});
  REQUIRE(r.exit_code == 0);
  const auto j = r.json();
  bool cpu_available = false;
  for (const auto& b : j["backends"]) {
    CHECK(b.contains("reason"));
    CHECK(b.contains("priority"));
    if (b["name"] == "cpu") cpu_available = b["available"].get<bool>();
  }
  CHECK(cpu_available);
  CHECK(j["auto"].is_string());
}

TEST_CASE("demo routes the planted needles and writes a PNG plot") {
  const std::string png = scratch_path("demo.png");
  std::remove(png.c_str());
  const auto r = run_cli({"demo", "--backend", "cpu", "--n", "1024", "--hq", "4", "--hkv", "2", "--d", "64",
                          "--needles", "3", "--dtype", "f32", "--json", "--plot", png});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = r.json();
  CHECK(j["backend"] == "cpu");
  CHECK(j["kv_heads"].size() == 2);
  const double sparsity = j["sparsity"].get<double>();
  CHECK(sparsity > 0.0);
  CHECK(sparsity < 1.0);
  REQUIRE(j["needles"].size() == 3);
  for (const auto& nd : j["needles"]) {
    // The planted direction dominates the needle queries' scores: nearly all of them must route the chunk, far
    // more than other queries do.
    for (const auto& f : nd["routed_fraction_per_kv_head"]) {
      CHECK(f.get<double>() >= 0.9);
      CHECK(f.get<double>() > nd["routed_fraction_other_queries"].get<double>());
    }
  }
  CHECK(j["error_vs_dense"]["max_abs"].get<double>() >= 0.0);
  CHECK(j["error_vs_dense"]["relative"].get<double>() < 1.0);

  std::ifstream in(png, std::ios::binary);
  REQUIRE(in.good());
  char sig[8] = {};
  in.read(sig, 8);
  CHECK(std::string(sig, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
}

TEST_CASE("demo text output names the sections") {
  const auto r = run_cli({"demo", "--n", "512", "--hq", "2", "--hkv", "1", "--needles", "2"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("routing per KV head") != std::string::npos);
  CHECK(r.out.find("needles") != std::string::npos);
  CHECK(r.out.find("error against dense attention") != std::string::npos);
}

TEST_CASE("verify passes on the CPU backend") {
  const auto r = run_cli({"verify", "--backend", "cpu", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, (r.out + r.err));
  const auto j = r.json();
  CHECK(j["passed"].get<bool>());
  int checked = 0;
  for (const auto& c : j["results"]) {
    if (c["skipped"].get<bool>()) continue;
    ++checked;
    CHECK(c["mask_errors"].get<int>() == 0);
    CHECK(c["o_max_error"].get<double>() <= c["o_tolerance"].get<double>());
  }
  CHECK(checked >= 5);
}

TEST_CASE("verify fails (exit 1) when the solver is only approximate") {
  // The released code's 3 Halley steps do not converge for alpha = 1.7 (one grid case): verify must notice.
  const auto r = run_cli({"verify", "--backend", "cpu", "--solver", "reference", "--json"});
  CHECK(r.exit_code == 1);
  CHECK_FALSE(r.json()["passed"].get<bool>());
}

TEST_CASE("bench prints a row per sparsity") {
  const auto r = run_cli({"bench", "--n", "512", "--hq", "2", "--hkv", "1", "--d", "64", "--repeats", "2",
                          "--warmup", "0", "--sparsity", "0.5,0.75", "--dtype", "f32", "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  const auto j = r.json();
  REQUIRE(j["stage2"].size() == 2);
  CHECK(j["stage2"][0]["chunk_sparsity"].get<double>() == doctest::Approx(0.5));
  CHECK(j["stage2"][1]["key_sparsity"].get<double>() > j["stage2"][0]["key_sparsity"].get<double>());
  CHECK(j["ms"]["dense"].get<double>() > 0.0);

  const auto text = run_cli({"bench", "--n", "256", "--hq", "2", "--hkv", "1", "--d", "64", "--repeats", "1",
                             "--warmup", "0", "--sparsity", "0.9"});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("stage 0") != std::string::npos);
  CHECK(text.out.find("90.00%") != std::string::npos);
}
