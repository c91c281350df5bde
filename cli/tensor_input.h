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
  // The optional batch layout (batch_input.h): read when the file holds tensors of these names.
  std::string seqlens_k = "seqlens_k", cu_seqlens_q = "cu_seqlens_q", cu_seqlens_k = "cu_seqlens_k";
  std::string block_table = "block_table";
  std::string layout = "bnhd";
  std::string dtype;  // empty: keep the file's dtype (f64 becomes f32)
  // Optional tensors named on the command line must be in the file; by default they are used when present.
  CLI::Option* summary_query_flag = nullptr;
  CLI::Option* seqlens_k_flag = nullptr;
  CLI::Option* cu_seqlens_q_flag = nullptr;
  CLI::Option* cu_seqlens_k_flag = nullptr;
  CLI::Option* block_table_flag = nullptr;
  CLI::Option* input_flag = nullptr;
};

// --input (required or not), --q/--k/--v/--summary-query, the batch layout's names, --layout, --dtype.
void add_input_options(CLI::App& app, InputOptions& options, bool input_required);

// The file's tensor called name, or null when it has none and the flag that sets the name was not given (a
// named tensor that is missing is an error listing the tensors present).
const io::Tensor* optional_tensor(const io::TensorFile& file, const std::string& name, const CLI::Option* flag);

// Tensors are [b, n, h, d] (bnhd) or [b, h, n, d] (bhnd); rank 3 means b = 1. The summary query is [h_kv, d] or
// the flat [h_kv * d] of the released checkpoints; when the file has none, it is zeros (unless the flag named one).
// With a block table, k and v are page pools [pages, P, h_kv, d] (or [pages, h_kv, P, d] in bhnd).
HostProblem load_problem(const InputOptions& options);

// A [b, n, h, d] tensor rearranged into the input's layout and rank.
io::Tensor to_input_layout(const io::Tensor& bnhd, const std::string& layout, int input_rank);

}  // namespace dashattn::cli
