// Flags shared by the subcommands: backend selection, output format and the method parameters.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "dashattn/backend.h"
#include "dashattn/params.h"
#include "dashattn/synthetic.h"

namespace dashattn::cli {

struct CommonOptions {
  std::string backend = "auto";
  bool json = false;
  CLI::Option* backend_flag = nullptr;

  // The backend named by --backend; without the flag the registry reads DASHATTN_BACKEND, then picks "auto".
  Backend& select_backend() const;
  std::string requested_backend() const;
};

struct MethodOptions {
  int chunk = 64;
  float alpha = 1.5f;
  float gamma = 1.0f;
  float sigma = 1e8f;
  std::string prior = "estimate_diagonal";
  float scale = 0.0f;
  std::string solver = "exact";

  MethodParams params() const;
};

void add_common_options(CLI::App& app, CommonOptions& options);
void add_method_options(CLI::App& app, MethodOptions& options);

// The size of a generated problem (demo, bench): --batch --n --hq --hkv --d --dtype, in the "Problem" group.
struct ShapeOptions {
  int64_t batch = 1, n = 4096, h_q = 8, h_kv = 2, d = 64;
  std::string dtype = "bf16";

  DType element_type() const;                  // parsed --dtype
  void apply(synthetic::Config* config) const;  // batch, n, heads, head dim
};
void add_shape_options(CLI::App& app, ShapeOptions& shape);

// --dtype for generated problems: f32, f16 or bf16.
CLI::Option* add_dtype_option(CLI::App& app, std::string& dtype, const std::string& description);
DType parse_dtype_or_throw(const std::string& name, const char* argument);

}  // namespace dashattn::cli
