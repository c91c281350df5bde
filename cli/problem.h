// Host-side attention problems and the calls that run them on a backend.
//
// The subcommands all follow the same path: host tensors in [b, n, h, d] order (io::Tensor, in the attention
// dtype) are copied to the backend's device, forward() or dense_attention() runs with every routing output
// requested, and the results come back to the host.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dashattn/dashattn.h"
#include "dashattn/io/tensor_file.h"
#include "dashattn/synthetic.h"

namespace dashattn::cli {

// The batch layout a tensor file may carry: BatchLayout's integer arrays in host memory. All empty: b sequences
// of n_q queries over n_k keys each.
struct HostBatch {
  std::vector<int32_t> seqlens_k;                   // [b]: key length of each sequence of a padded batch
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k;  // [num_seqs + 1]: prefix sums of a packed varlen batch
  std::vector<int32_t> block_table;                 // [sequences, stride]: k and v are page pools
  int64_t block_table_stride = 0;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;       // longest sequence (packed) / padded key length (paged)

  bool packed() const { return !cu_seqlens_k.empty(); }
  bool paged() const { return !block_table.empty(); }
  bool any() const { return packed() || paged() || !seqlens_k.empty(); }
  // Points at these host arrays: valid while this object lives, for host-side checks and statistics.
  BatchLayout view() const;
};

struct HostProblem {
  // q [b, n_q, h_q, d] and k, v [b, n_k, h_kv, d] in one attention dtype; a packed batch has b = 1 and its
  // sequences' rows concatenated; a paged batch's k and v are page pools [pages, P, h_kv, d].
  io::Tensor q, k, v;
  io::Tensor summary_query;  // f32 [h_kv, d]; numel() == 0 means zeros (mean pooling)
  HostBatch layout;
  int source_rank = 4;       // rank of q in the file it came from (3: no b axis, one or packed sequences)

  DType dtype() const { return q.dtype(); }
  int64_t batch() const { return q.shape()[0]; }  // b axis of q (1 for a packed batch)
  int64_t sequences() const {
    return layout.packed() ? static_cast<int64_t>(layout.cu_seqlens_k.size()) - 1 : q.shape()[0];
  }
  int64_t rows_q() const { return q.shape()[1]; }  // query rows per b index (all rows of a packed batch)
  // Padded query and key lengths: the longest sequence of a packed or paged batch.
  int64_t n_q() const { return layout.packed() ? layout.max_seqlen_q : q.shape()[1]; }
  int64_t n_k() const { return layout.packed() || layout.paged() ? layout.max_seqlen_k : k.shape()[1]; }
  int64_t page_size() const { return layout.paged() ? k.shape()[1] : 0; }
  int64_t h_q() const { return q.shape()[2]; }
  int64_t h_kv() const { return k.shape()[2]; }
  int64_t d() const { return q.shape()[3]; }
  bool has_summary_query() const { return summary_query.numel() > 0; }
  std::string describe() const;  // "b=1 n=4096 h_q=8 h_kv=2 d=64 bf16" (+ ", paged: 64-key pages, 12 pages")
};

// synthetic::generate, with errors about a config field renamed to the flag that sets it (h_q -> --hq).
synthetic::Problem generate_synthetic(const synthetic::Config& config);

// A synthetic problem in dtype; n_q < n keeps only the last n_q queries (a decode-like problem).
HostProblem host_problem(const synthetic::Problem& p, DType dtype, int64_t n_q = 0);

struct ForwardOutputs {
  io::Tensor o;         // [b, n_q, h_q, d], dtype of q
  io::Tensor lse;       // f32 [b, h_q, n_q]
  io::Tensor mask;      // u32 [b, h_kv, n_q, words]
  io::Tensor active;    // i32 [b, h_kv, n_q]
  io::Tensor tau;       // f32 [b, h_q, n_q]
  io::Tensor mu;        // f32 [b, h_kv, n_q]
  io::Tensor summaries; // [b, n_k / C, h_kv, d], dtype of k
  double seconds = 0;   // forward() alone, device-synchronized
  int64_t words() const { return mask.shape()[3]; }
};

ForwardOutputs run_forward(Backend& backend, const HostProblem& problem, const MethodParams& method);

struct DenseOutputs {
  io::Tensor o;    // dtype of q
  io::Tensor lse;  // f32 [b, h_q, n_q]
  double seconds = 0;
};

DenseOutputs run_dense(Backend& backend, const HostProblem& problem, float scale);

RoutingStats stats_of(const ForwardOutputs& out, const HostProblem& problem, const MethodParams& method);

// Element-wise comparison of two tensors of the same shape read as float.
struct Difference {
  double max_abs = 0;
  double relative = 0;  // ||a - b||_2 / ||b||_2
  double max_abs_reference = 0;
};
Difference compare(const io::Tensor& a, const io::Tensor& reference);

std::vector<float> to_float(const io::Tensor& t);
io::Tensor from_float(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                      const std::vector<float>& values);

}  // namespace dashattn::cli
