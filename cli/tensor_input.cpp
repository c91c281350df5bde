#include "tensor_input.h"

#include <cstring>

#include "batch_input.h"
#include "dashattn/error.h"
#include "options.h"
#include "output.h"

namespace dashattn::cli {
namespace {

// Swaps axes 1 and 2 of a rank-4 tensor ([b, h, n, d] <-> [b, n, h, d]).
io::Tensor swap_axes_1_2(const io::Tensor& t) {
  const auto& s = t.shape();
  io::Tensor out(t.name(), t.dtype(), {s[0], s[2], s[1], s[3]});
  const size_t row = static_cast<size_t>(s[3] * dtype_size(t.dtype()));
  for (int64_t b = 0; b < s[0]; ++b) {
    for (int64_t i = 0; i < s[1]; ++i) {
      for (int64_t j = 0; j < s[2]; ++j) {
        std::memcpy(out.data() + static_cast<size_t>((b * s[2] + j) * s[1] + i) * row,
                    t.data() + static_cast<size_t>((b * s[1] + i) * s[2] + j) * row, row);
      }
    }
  }
  return out;
}

io::Tensor convert_tensor(const io::Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  return from_float(t.name(), dtype, t.shape(), to_float(t));
}

// One attention tensor in [b, n, h, d] order.
io::Tensor attention_tensor(const io::TensorFile& file, const std::string& name, const char* flag,
                            const std::string& layout) {
  const io::Tensor& t = file.at(name);
  const std::string argument = std::string(flag) + " (tensor '" + name + "')";
  if (t.rank() != 3 && t.rank() != 4) {
    throw InvalidArgument(argument, layout == "bhnd" ? "rank 4 [b, h, n, d] or rank 3 [h, n, d]"
                                                     : "rank 4 [b, n, h, d] or rank 3 [n, h, d]",
                          "shape " + format_shape(t.shape()));
  }
  if (!is_attention_dtype(t.dtype()) && t.dtype() != DType::kF64) {
    throw InvalidArgument(argument, "f32, f16, bf16 or f64 elements", dtype_name(t.dtype()));
  }
  io::Tensor r = t;
  if (t.rank() == 3) {
    std::vector<int64_t> shape = t.shape();
    shape.insert(shape.begin(), 1);
    r = io::Tensor(name, t.dtype(), shape, t.bytes());
  }
  return layout == "bhnd" ? swap_axes_1_2(r) : r;
}

}  // namespace

void add_input_options(CLI::App& app, InputOptions& o, bool input_required) {
  o.input_flag = app.add_option("--input,-i", o.path, "Tensor file (safetensors, .npy/.npz) holding q, k, v");
  if (input_required) o.input_flag->required();
  const std::string group = "Input";
  o.input_flag->group(group);
  // A tensor-name flag of the Input group (the optional ones keep their option to tell "named" from "default").
  auto name_flag = [&](const char* flag, std::string& name, const std::string& help) {
    return app.add_option(flag, name, help)->group(group);
  };
  name_flag("--q", o.q, "Name of the query tensor in the input");
  name_flag("--k", o.k, "Name of the key tensor");
  name_flag("--v", o.v, "Name of the value tensor");
  o.summary_query_flag =
      name_flag("--summary-query", o.summary_query,
                "Name of the summary query [h_kv, d] (or [h_kv*d]); zeros when the file has no such tensor");
  o.seqlens_k_flag =
      name_flag("--seqlens-k", o.seqlens_k, "Name of the int32 [b] key length of each sequence of a padded batch");
  const std::string packed = " of a packed varlen batch (with the other prefix sum)";
  o.cu_seqlens_q_flag = name_flag("--cu-seqlens-q", o.cu_seqlens_q,
                                  "Name of the int32 [num_seqs + 1] prefix sums of the query rows" + packed);
  o.cu_seqlens_k_flag = name_flag("--cu-seqlens-k", o.cu_seqlens_k,
                                  "Name of the int32 [num_seqs + 1] prefix sums of the key counts" + packed);
  o.block_table_flag =
      name_flag("--block-table", o.block_table,
                "Name of the int32 [sequences, width] block table; k and v are then page pools [pages, P, h_kv, d]");
  app.add_option("--layout", o.layout, "Memory layout of q, k, v: bnhd = [b, n, h, d], bhnd = [b, h, n, d]")
      ->check(CLI::IsMember({"bnhd", "bhnd"}))
      ->group(group);
  app.add_option("--dtype", o.dtype, "Convert q, k, v to this dtype first (default: the file's; f64 becomes f32)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}))
      ->group(group);
}

const io::Tensor* optional_tensor(const io::TensorFile& file, const std::string& name, const CLI::Option* flag) {
  const bool named = flag != nullptr && flag->count() > 0;
  if (!file.contains(name) && !named) return nullptr;
  return &file.at(name);
}

HostProblem load_problem(const InputOptions& o) {
  const io::TensorFile file = io::read_tensor_file(o.path);
  HostProblem p;
  p.source_rank = file.at(o.q).rank();
  p.q = attention_tensor(file, o.q, "--q", o.layout);
  p.k = attention_tensor(file, o.k, "--k", o.layout);
  p.v = attention_tensor(file, o.v, "--v", o.layout);
  if (p.q.dtype() != p.k.dtype() || p.q.dtype() != p.v.dtype()) {
    if (o.dtype.empty()) {
      throw InvalidArgument("--k/--v", std::string("the dtype of q (") + dtype_name(p.q.dtype()) +
                                           "), or --dtype to convert all three",
                            std::string("k ") + dtype_name(p.k.dtype()) + ", v " + dtype_name(p.v.dtype()));
    }
  }
  DType target = p.q.dtype() == DType::kF64 ? DType::kF32 : p.q.dtype();
  if (!o.dtype.empty()) target = parse_dtype_or_throw(o.dtype, "--dtype");
  p.q = convert_tensor(p.q, target);
  p.k = convert_tensor(p.k, target);
  p.v = convert_tensor(p.v, target);

  if (const io::Tensor* summary_query = optional_tensor(file, o.summary_query, o.summary_query_flag)) {
    const io::Tensor& sq = *summary_query;
    const int64_t h_kv = p.k.shape()[2], d = p.k.shape()[3];
    if (sq.numel() != h_kv * d || !(is_attention_dtype(sq.dtype()) || sq.dtype() == DType::kF64)) {
      throw InvalidArgument("--summary-query (tensor '" + o.summary_query + "')",
                            "f32/f16/bf16 of shape [" + std::to_string(h_kv) + ", " + std::to_string(d) + "] or [" +
                                std::to_string(h_kv * d) + "]",
                            std::string(dtype_name(sq.dtype())) + " " + format_shape(sq.shape()));
    }
    p.summary_query = from_float("summary_query", DType::kF32, {h_kv, d}, to_float(sq));
  }
  p.layout = load_batch_layout(file, o, p);
  return p;
}

io::Tensor to_input_layout(const io::Tensor& bnhd, const std::string& layout, int input_rank) {
  io::Tensor r = layout == "bhnd" ? swap_axes_1_2(bnhd) : bnhd;
  if (input_rank == 3) {
    std::vector<int64_t> shape(r.shape().begin() + 1, r.shape().end());
    r = io::Tensor(r.name(), r.dtype(), shape, r.bytes());
  }
  return r;
}

}  // namespace dashattn::cli
