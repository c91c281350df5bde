// Reading an attention problem (q, k, v and an optional summary query) from a tensor file by name, in either
// memory layout, and writing outputs back in the layout the inputs came in.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "problem.h"

namespace dashattn::cli {

struct InputOptions {
  std::string path;
  std::string q = "q", k = "k", v = "v", summary_query = "summary_query";
  std::string layout = "bnhd";
  std::string dtype;  // empty: keep the file's dtype (f64 becomes f32)
  CLI::Option* summary_query_flag = nullptr;
  CLI::Option* input_flag = nullptr;
};

// --input (required or not), --q/--k/--v/--summary-query, --layout, --dtype.
void add_input_options(CLI::App& app, InputOptions& options, bool input_required);

// Tensors are [b, n, h, d] (bnhd) or [b, h, n, d] (bhnd); rank 3 means b = 1. The summary query is [h_kv, d] or
// the flat [h_kv * d] of the released checkpoints; when the file has none, it is zeros (unless the flag named one).
HostProblem load_problem(const InputOptions& options);

// A [b, n, h, d] tensor rearranged into the input's layout and rank.
io::Tensor to_input_layout(const io::Tensor& bnhd, const std::string& layout, int input_rank);

}  // namespace dashattn::cli
