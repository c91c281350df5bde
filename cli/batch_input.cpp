#include "batch_input.h"

#include <algorithm>

#include "dashattn/error.h"
#include "output.h"

namespace dashattn::cli {
namespace {

std::string tensor_argument(const char* flag, const std::string& name) {
  return std::string(flag) + " (tensor '" + name + "')";
}

std::string dims(std::initializer_list<std::string> d) {
  std::string s = "[";
  for (const std::string& x : d) s += (s.size() > 1 ? ", " : "") + x;
  return s + "]";
}

// An int32 tensor of the given rank, read into a vector; expected is its shape in words ("[b]").
std::vector<int32_t> int32_values(const io::Tensor& t, const char* flag, const std::string& expected, int rank) {
  if (t.dtype() != DType::kI32 || t.rank() != rank) {
    throw InvalidArgument(tensor_argument(flag, t.name()), "int32 " + expected,
                          std::string(dtype_name(t.dtype())) + " " + format_shape(t.shape()));
  }
  const int32_t* data = reinterpret_cast<const int32_t*>(t.data());
  return std::vector<int32_t>(data, data + t.numel());
}

void require_length(const io::Tensor& t, const char* flag, const std::string& expected, int64_t length) {
  if (t.shape()[0] != length) {
    throw InvalidArgument(tensor_argument(flag, t.name()), "int32 " + expected, format_shape(t.shape()));
  }
}

// The longest step of a prefix sum, at least 1 so that a malformed array reaches the library's element checks.
int64_t longest_step(const std::vector<int32_t>& cu) {
  int64_t longest = 1;
  for (size_t i = 1; i < cu.size(); ++i) longest = std::max<int64_t>(longest, int64_t{cu[i]} - cu[i - 1]);
  return longest;
}

}  // namespace

HostBatch load_batch_layout(const io::TensorFile& file, const InputOptions& o, const HostProblem& p) {
  HostBatch b;
  const io::Tensor* seqlens_k = optional_tensor(file, o.seqlens_k, o.seqlens_k_flag);
  const io::Tensor* cu_q = optional_tensor(file, o.cu_seqlens_q, o.cu_seqlens_q_flag);
  const io::Tensor* cu_k = optional_tensor(file, o.cu_seqlens_k, o.cu_seqlens_k_flag);
  const io::Tensor* table = optional_tensor(file, o.block_table, o.block_table_flag);

  if (seqlens_k) {
    const std::string expected = dims({"b = " + std::to_string(p.batch())});
    b.seqlens_k = int32_values(*seqlens_k, "--seqlens-k", expected, 1);
    require_length(*seqlens_k, "--seqlens-k", expected, p.batch());
  }
  if (cu_q || cu_k) {
    // A packed batch needs both: the query rows of each sequence as well as its keys.
    if (!cu_q || !cu_k) {
      const bool has_q = cu_q != nullptr;
      throw InvalidArgument(has_q ? tensor_argument("--cu-seqlens-k", o.cu_seqlens_k)
                                  : tensor_argument("--cu-seqlens-q", o.cu_seqlens_q),
                            std::string("in the file together with ") + (has_q ? o.cu_seqlens_q : o.cu_seqlens_k) +
                                " (a packed varlen batch gives both prefix sums)",
                            "missing");
    }
    b.cu_seqlens_q = int32_values(*cu_q, "--cu-seqlens-q", "[num_seqs + 1] with num_seqs >= 1", 1);
    b.cu_seqlens_k = int32_values(*cu_k, "--cu-seqlens-k", "[num_seqs + 1] with num_seqs >= 1", 1);
    if (b.cu_seqlens_q.size() < 2) {
      require_length(*cu_q, "--cu-seqlens-q", "[num_seqs + 1] with num_seqs >= 1", 2);
    }
    require_length(*cu_k, "--cu-seqlens-k", dims({std::to_string(b.cu_seqlens_q.size()) + " (as cu_seqlens_q)"}),
                   static_cast<int64_t>(b.cu_seqlens_q.size()));
    b.max_seqlen_q = longest_step(b.cu_seqlens_q);
    b.max_seqlen_k = longest_step(b.cu_seqlens_k);
  }
  if (!table) return b;

  if (!seqlens_k && !cu_k) {
    throw InvalidArgument(tensor_argument("--block-table", table->name()),
                          "the key length of each sequence beside it: " + o.seqlens_k + " [b] (padded batch) or " +
                              o.cu_seqlens_q + " and " + o.cu_seqlens_k + " [num_seqs + 1] (packed varlen batch)",
                          "a block table without lengths");
  }
  // A paged padded batch's padded key length is its longest sequence (the pool has no sequence axis).
  if (!b.packed()) {
    b.max_seqlen_k = std::max<int64_t>(1, *std::max_element(b.seqlens_k.begin(), b.seqlens_k.end()));
  }
  const int64_t rows = b.packed() ? static_cast<int64_t>(b.cu_seqlens_k.size()) - 1 : p.batch();
  const int64_t page = p.k.shape()[1];
  // A page size the library rejects gets its message there; the width is only meaningful for a valid one.
  const int64_t need = page > 0 ? (b.max_seqlen_k + page - 1) / page : 1;
  const std::string expected =
      dims({std::to_string(rows) + " sequences", ">= " + std::to_string(need) + " pages per sequence"}) +
      " (the longest sequence has " + std::to_string(b.max_seqlen_k) + " keys, pages of k hold " +
      std::to_string(page) + ")";
  b.block_table = int32_values(*table, "--block-table", expected, 2);
  if (table->shape()[0] != rows || table->shape()[1] < need) {
    throw InvalidArgument(tensor_argument("--block-table", table->name()), "int32 " + expected,
                          format_shape(table->shape()));
  }
  b.block_table_stride = table->shape()[1];
  return b;
}

}  // namespace dashattn::cli
