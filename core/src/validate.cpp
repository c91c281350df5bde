// Argument validation: every rule of the contract that can be checked on the host, with messages that name the
// argument and the expected value. Integer arrays (cu_seqlens, seqlens) are checked element by element only when
// they are host memory (CPU tensors); on a GPU that would need a synchronization, and FlashAttention's convention
// is that their contents are the caller's contract.
#include "dashattn/validate.h"

#include <cmath>
#include <string>

#include "dashattn/error.h"
#include "dashattn/geometry.h"

namespace dashattn {
namespace {

constexpr int64_t kMaxHeadDim = 512;
constexpr int kMinChunk = 4, kMaxChunk = 1024;

std::string str(int64_t v) { return std::to_string(v); }

void require_defined(const std::string& name, const TensorView& t) {
  if (!t.defined()) throw InvalidArgument(name, "a tensor with non-null data", "null data");
}

void require_dtype(const std::string& name, const TensorView& t, DType want) {
  if (t.dtype != want) throw InvalidArgument(name + ".dtype", dtype_name(want), dtype_name(t.dtype));
}

void require_device(const std::string& name, const TensorView& t, const Device& dev) {
  if (t.device != dev) {
    throw InvalidArgument(name + ".device", std::string(device_type_name(dev.type)) + ":" + str(dev.index) +
                                                " (the device of q)",
                          std::string(device_type_name(t.device.type)) + ":" + str(t.device.index));
  }
}

void require_inner_contiguous(const std::string& name, const TensorView& t) {
  if (t.rank > 0 && t.shape[t.rank - 1] > 1 && t.stride[t.rank - 1] != 1) {
    throw InvalidArgument(name + ".stride[" + str(t.rank - 1) + "]", "1 (the last dimension contiguous)",
                          str(t.stride[t.rank - 1]));
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) throw InvalidArgument(name + ".shape[" + str(i) + "]", ">= 0", str(t.shape[i]));
  }
}

// Rank-3 [total, h, d] (packed varlen) becomes [1, total, h, d]; rank 4 stays.
TensorView to_rank4(const std::string& name, TensorView t, bool varlen) {
  require_defined(name, t);
  if (t.rank == 4) {
    if (varlen && t.shape[0] != 1) {
      throw InvalidArgument(name + ".shape[0]", "1 for a packed varlen batch (rows of all sequences concatenated)",
                            str(t.shape[0]));
    }
    return t;
  }
  if (t.rank == 3 && varlen) {
    TensorView r = t;
    r.rank = 4;
    r.shape = {1, t.shape[0], t.shape[1], t.shape[2]};
    r.stride = {t.shape[0] * t.stride[0], t.stride[0], t.stride[1], t.stride[2]};
    return r;
  }
  throw InvalidArgument(name, varlen ? "rank 3 [total, h, d] or rank 4 [1, total, h, d] (packed varlen)"
                                     : "rank 4 [b, n, h, d]",
                        "rank " + str(t.rank) + " " + t.shape_string());
}

// Rank-2 [h, total] per-row outputs of a varlen batch become [1, h, total].
TensorView rows_to_rank3(TensorView t, bool varlen) {
  if (varlen && t.rank == 2) {
    TensorView r = t;
    r.rank = 3;
    r.shape = {1, t.shape[0], t.shape[1], 0};
    r.stride = {t.shape[0] * t.stride[0], t.stride[0], t.stride[1], 0};
    return r;
  }
  return t;
}

void require_shape(const std::string& name, const TensorView& t, std::initializer_list<int64_t> want,
                   int min_last_dim_index = -1) {
  bool ok = t.rank == static_cast<int>(want.size());
  int i = 0;
  std::string expected = "[";
  for (int64_t w : want) {
    expected += (i ? ", " : "") + (i == min_last_dim_index ? ">= " + str(w) : str(w));
    if (ok) ok = (i == min_last_dim_index) ? t.shape[i] >= w : t.shape[i] == w;
    ++i;
  }
  expected += "]";
  if (!ok) throw InvalidArgument(name + ".shape", expected, t.shape_string());
}

void check_attention_input(const std::string& name, const TensorView& t, DType dtype, const Device& dev) {
  require_defined(name, t);
  if (!is_attention_dtype(t.dtype)) throw InvalidArgument(name + ".dtype", "f32, f16 or bf16", dtype_name(t.dtype));
  require_dtype(name, t, dtype);
  require_device(name, t, dev);
  require_inner_contiguous(name, t);
}

struct Inputs {
  TensorView q, k, v;  // rank 4
  ProblemShape shape;
};

// Sequence i's key count read from host-visible batch arrays (cu_seqlens_k, else seqlens_k, else n_k), checked
// to lie in [0, n_k] and named by the array it came from.
int64_t host_key_length(const BatchLayout& b, int64_t i, int64_t n_k) {
  const int64_t nk = b.cu_seqlens_k ? b.cu_seqlens_k[i + 1] - b.cu_seqlens_k[i] : b.seqlens_k ? b.seqlens_k[i] : n_k;
  if (nk < 0 || nk > n_k) {
    throw InvalidArgument(std::string(b.cu_seqlens_k ? "cu_seqlens_k" : "seqlens_k") + "[" + str(i) + "]",
                          "a length in [0, " + str(n_k) + "]", str(nk));
  }
  return nk;
}

// A paged batch (block_table): k is a page pool [pages, P, h_kv, d]. Checks the page size against the chunk and
// the 64-key tile, the table's width against max_seqlen_k and, in host memory, every entry a sequence uses (its
// length from cu_seqlens_k in a packed batch, seqlens_k or max_seqlen_k in a padded one).
void check_pages(const BatchLayout& b, const TensorView& k, int64_t chunk, int64_t batch, bool host_visible) {
  const int64_t pages = k.shape[0], page = k.shape[1];
  if (pages < 1) throw InvalidArgument("k.shape[0] (pages of the pool)", ">= 1 with block_table", str(pages));
  if (!is_valid_page_size(page, chunk)) {
    throw InvalidArgument("k.shape[1] (page size)",
                          "a positive multiple of 64 and of chunk_size = " + str(chunk) + " with block_table", str(page));
  }
  if (b.max_seqlen_k < 1) {
    throw InvalidArgument("max_seqlen_k", ">= 1 with block_table (the padded key length n_k)", str(b.max_seqlen_k));
  }
  const int64_t need = (b.max_seqlen_k + page - 1) / page;
  if (b.block_table_stride < need) {
    throw InvalidArgument("block_table_stride", ">= ceil(max_seqlen_k / page size) = " + str(need), str(b.block_table_stride));
  }
  if (!host_visible) return;
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t nk = host_key_length(b, i, b.max_seqlen_k);
    for (int64_t j = 0; j < (nk + page - 1) / page; ++j) {
      const int64_t entry = b.block_table[i * b.block_table_stride + j];
      if (entry < 0 || entry >= pages) {
        throw InvalidArgument("block_table[" + str(i) + ", " + str(j) + "]", "a page in [0, " + str(pages) + ")",
                              str(entry));
      }
    }
  }
}

// Validates the batch layout against q/k and returns the derived sizes.
void check_batch(const BatchLayout& b, const TensorView& q, const TensorView& k, bool host_visible, ProblemShape* s) {
  if (b.is_varlen()) {
    if (!b.cu_seqlens_q) throw InvalidArgument("cu_seqlens_q", "non-null together with cu_seqlens_k", "null");
    if (!b.cu_seqlens_k) throw InvalidArgument("cu_seqlens_k", "non-null together with cu_seqlens_q", "null");
    if (b.seqlens_q || b.seqlens_k) {
      throw InvalidArgument("seqlens_q/seqlens_k", "null with a packed varlen batch (cu_seqlens)", "non-null");
    }
    if (b.num_seqs < 1) throw InvalidArgument("num_seqs", ">= 1 with cu_seqlens", str(b.num_seqs));
    if (b.max_seqlen_q < 1) throw InvalidArgument("max_seqlen_q", ">= 1 with cu_seqlens", str(b.max_seqlen_q));
    if (b.max_seqlen_k < 1) throw InvalidArgument("max_seqlen_k", ">= 1 with cu_seqlens", str(b.max_seqlen_k));
    s->batch = b.num_seqs;
    s->n_q = b.max_seqlen_q;
    s->n_k = b.max_seqlen_k;
    if (host_visible) {
      const int32_t* cq = b.cu_seqlens_q;
      const int32_t* ck = b.cu_seqlens_k;
      if (cq[0] != 0) throw InvalidArgument("cu_seqlens_q[0]", "0", str(cq[0]));
      if (ck[0] != 0) throw InvalidArgument("cu_seqlens_k[0]", "0", str(ck[0]));
      for (int i = 0; i < b.num_seqs; ++i) {
        const int64_t nq = cq[i + 1] - cq[i], nk = ck[i + 1] - ck[i];
        const std::string at = "[" + str(i + 1) + "]";
        if (nq < 0 || nq > b.max_seqlen_q) {
          throw InvalidArgument("cu_seqlens_q" + at, "non-decreasing with steps <= max_seqlen_q = " +
                                                         str(b.max_seqlen_q), str(cq[i + 1]));
        }
        if (nk < 0 || nk > b.max_seqlen_k) {
          throw InvalidArgument("cu_seqlens_k" + at, "non-decreasing with steps <= max_seqlen_k = " +
                                                         str(b.max_seqlen_k), str(ck[i + 1]));
        }
        if (nq > nk) {
          throw InvalidArgument("cu_seqlens_q" + at, "sequence " + str(i) + " with n_q <= n_k = " + str(nk),
                                "n_q = " + str(nq));
        }
      }
      if (cq[b.num_seqs] != q.shape[1]) {
        throw InvalidArgument("cu_seqlens_q[num_seqs]", "the rows of q (" + str(q.shape[1]) + ")",
                              str(cq[b.num_seqs]));
      }
      if (!b.is_paged() && ck[b.num_seqs] != k.shape[1]) {
        throw InvalidArgument("cu_seqlens_k[num_seqs]", "the rows of k (" + str(k.shape[1]) + ")",
                              str(ck[b.num_seqs]));
      }
    }
    // A packed batch's keys may live in a page pool: then cu_seqlens_k gives the lengths, the table the rows.
    if (b.is_paged()) check_pages(b, k, s->chunk, b.num_seqs, host_visible);
    return;
  }
  s->batch = q.shape[0];
  s->n_q = q.shape[1];
  s->n_k = b.is_paged() ? b.max_seqlen_k : k.shape[1];
  if (b.is_paged()) {
    check_pages(b, k, s->chunk, s->batch, host_visible);
  } else if (k.shape[0] != q.shape[0]) {
    throw InvalidArgument("k.shape[0]", str(q.shape[0]) + " (batch of q)", str(k.shape[0]));
  }
  if (s->n_q > s->n_k) {
    throw InvalidArgument("q.shape[1]", "n_q <= n_k = " + str(s->n_k) + " (bottom-right causal alignment)",
                          str(s->n_q));
  }
  if (host_visible && (b.seqlens_q || b.seqlens_k)) {
    for (int64_t i = 0; i < s->batch; ++i) {
      const int64_t nk = host_key_length(b, i, s->n_k);
      const int64_t nq = b.seqlens_q ? b.seqlens_q[i] : s->n_q;
      const std::string at = "[" + str(i) + "]";
      if (nq < 0 || nq > s->n_q) throw InvalidArgument("seqlens_q" + at, "in [0, " + str(s->n_q) + "]", str(nq));
      if (nq > nk) throw InvalidArgument("seqlens_q" + at, "<= seqlens_k" + at + " = " + str(nk), str(nq));
    }
  }
}

// q, k (and v when given) as rank-4 views plus the problem sizes.
Inputs check_qkv(const TensorView& q_in, const TensorView& k_in, const TensorView* v_in, const BatchLayout& batch,
                 const MethodParams* method, float scale) {
  Inputs in;
  const bool varlen = batch.is_varlen();
  if (!method && batch.is_paged()) {
    throw InvalidArgument("block_table", "null for dense attention (it takes contiguous K/V)", "non-null");
  }
  require_defined("q", q_in);
  in.q = to_rank4("q", q_in, varlen);
  const Device dev = q_in.device;
  check_attention_input("q", in.q, in.q.dtype, dev);
  require_defined("k", k_in);
  // A page pool is rank 4 [pages, P, h_kv, d] in a packed batch too.
  const bool packed_kv = varlen && !batch.is_paged();
  in.k = to_rank4("k", k_in, packed_kv);
  check_attention_input("k", in.k, in.q.dtype, dev);
  if (v_in) {
    require_defined("v", *v_in);
    in.v = to_rank4("v", *v_in, packed_kv);
    check_attention_input("v", in.v, in.q.dtype, dev);
  }
  ProblemShape& s = in.shape;
  s.h_q = in.q.shape[2];
  s.d = in.q.shape[3];
  s.h_kv = in.k.shape[2];
  if (s.d < 1 || s.d > kMaxHeadDim) throw InvalidArgument("q.shape[3] (head dim)", "in [1, 512]", str(s.d));
  if (in.k.shape[3] != s.d) throw InvalidArgument("k.shape[3] (head dim)", str(s.d) + " (head dim of q)", str(in.k.shape[3]));
  if (s.h_kv < 1 || s.h_q % s.h_kv != 0) {
    throw InvalidArgument("k.shape[2] (KV heads)", "a divisor of the query heads h_q = " + str(s.h_q), str(s.h_kv));
  }
  if (v_in) {
    for (int i = 0; i < 4; ++i) {
      if (in.v.shape[i] != in.k.shape[i]) throw InvalidArgument("v.shape", "equal to k.shape " + in.k.shape_string(), in.v.shape_string());
    }
  }
  s.group = s.h_q / s.h_kv;
  s.chunk = method ? method->chunk_size : 64;
  check_batch(batch, in.q, in.k, dev.type == DeviceType::kCpu, &s);
  s.rows_q = in.q.shape[1];
  s.max_chunks = num_complete_chunks(s.n_k, s.chunk);
  s.mask_words = mask_words(s.n_k, s.chunk);
  const float sc = method ? method->scale : scale;
  s.scale = sc > 0 ? sc : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
  return in;
}

void check_output(const std::string& name, const TensorView& o, const TensorView& q) {
  require_defined(name, o);
  require_device(name, o, q.device);
  if (o.dtype != q.dtype && o.dtype != DType::kF32) {
    throw InvalidArgument(name + ".dtype", std::string(dtype_name(q.dtype)) + " (dtype of q) or f32", dtype_name(o.dtype));
  }
  for (int i = 0; i < 4; ++i) {
    if (o.shape[i] != q.shape[i]) throw InvalidArgument(name + ".shape", "equal to q.shape " + q.shape_string(), o.shape_string());
  }
  require_inner_contiguous(name, o);
}

TensorView check_per_row(const std::string& name, const TensorView& t_in, DType dtype, int64_t b, int64_t heads,
                         int64_t rows, const Device& dev, bool varlen) {
  TensorView t = rows_to_rank3(t_in, varlen);
  require_dtype(name, t, dtype);
  require_device(name, t, dev);
  require_shape(name, t, {b, heads, rows});
  return t;
}

void check_summary_query(const TensorView& sq, const ProblemShape& s, const TensorView& k) {
  if (!sq.defined()) return;
  require_device("summary_query", sq, k.device);
  if (sq.dtype != k.dtype && sq.dtype != DType::kF32) {
    throw InvalidArgument("summary_query.dtype", std::string(dtype_name(k.dtype)) + " (dtype of k) or f32",
                          dtype_name(sq.dtype));
  }
  require_shape("summary_query", sq, {s.h_kv, s.d});
  require_inner_contiguous("summary_query", sq);
}

void check_summaries(const TensorView& sm, const ProblemShape& s, DType key_dtype, const Device& dev) {
  require_defined("summaries", sm);
  require_dtype("summaries", sm, key_dtype);
  require_device("summaries", sm, dev);
  require_shape("summaries", sm, {s.batch, s.max_chunks, s.h_kv, s.d}, 1);
  require_inner_contiguous("summaries", sm);
}

RoutingView check_routing(const RoutingView& r, const ProblemShape& s, const Device& dev, bool varlen,
                          bool need_mask, bool need_tau_mu) {
  RoutingView out = r;
  const int64_t b = varlen ? 1 : s.batch;
  if (need_mask) require_defined("routing.mask", r.mask);
  if (r.mask.defined()) {
    TensorView m = r.mask;
    if (varlen && m.rank == 3) {
      m.rank = 4;
      m.shape = {1, r.mask.shape[0], r.mask.shape[1], r.mask.shape[2]};
      m.stride = {r.mask.shape[0] * r.mask.stride[0], r.mask.stride[0], r.mask.stride[1], r.mask.stride[2]};
    }
    require_dtype("routing.mask", m, DType::kU32);
    require_device("routing.mask", m, dev);
    require_shape("routing.mask", m, {b, s.h_kv, s.rows_q, s.mask_words}, 3);
    require_inner_contiguous("routing.mask", m);
    out.mask = m;
  }
  if (need_tau_mu) {
    require_defined("routing.tau", r.tau);
    require_defined("routing.mu", r.mu);
  }
  if (r.tau.defined()) out.tau = check_per_row("routing.tau", r.tau, DType::kF32, b, s.h_q, s.rows_q, dev, varlen);
  if (r.mu.defined()) out.mu = check_per_row("routing.mu", r.mu, DType::kF32, b, s.h_kv, s.rows_q, dev, varlen);
  if (r.active_chunks.defined()) {
    out.active_chunks = check_per_row("routing.active_chunks", r.active_chunks, DType::kI32, b, s.h_kv, s.rows_q,
                                      dev, varlen);
  }
  return out;
}

}  // namespace

void validate_method(const MethodParams& m) {
  if (m.chunk_size < kMinChunk || m.chunk_size > kMaxChunk) {
    throw InvalidArgument("chunk_size", "in [" + str(kMinChunk) + ", " + str(kMaxChunk) + "] (16, 32, 64 or 128 typical)",
                          str(m.chunk_size));
  }
  if (!(m.alpha > 1.0f) || !std::isfinite(m.alpha)) {
    throw InvalidArgument("alpha", "a finite value > 1 (alpha -> 1 is softmax, which routes every chunk)",
                          std::to_string(m.alpha));
  }
  if (!std::isfinite(m.gamma)) throw InvalidArgument("gamma", "a finite value", std::to_string(m.gamma));
  if (!(m.sigma > 0.0f)) throw InvalidArgument("sigma", "a value > 0", std::to_string(m.sigma));
  if (!(m.scale >= 0.0f) || !std::isfinite(m.scale)) {
    throw InvalidArgument("scale", "a finite value > 0, or 0 for 1/sqrt(d)", std::to_string(m.scale));
  }
  if (m.prior != PriorMode::kEstimateDiagonal && m.prior != PriorMode::kRaw && m.prior != PriorMode::kNone) {
    throw InvalidArgument("prior", "estimate_diagonal, raw or none", str(static_cast<int>(m.prior)));
  }
  if (m.solver != EntmaxSolver::kExact && m.solver != EntmaxSolver::kReference) {
    throw InvalidArgument("solver", "exact or reference", str(static_cast<int>(m.solver)));
  }
}

ForwardParams normalize_forward(const ForwardParams& p) {
  validate_method(p.method);
  ForwardParams n = p;
  Inputs in = check_qkv(p.q, p.k, &p.v, p.batch, &p.method, 0.f);
  const ProblemShape& s = in.shape;
  const bool varlen = p.batch.is_varlen();
  n.q = in.q;
  n.k = in.k;
  n.v = in.v;
  check_output("o", to_rank4("o", p.o, varlen), in.q);
  n.o = to_rank4("o", p.o, varlen);
  const int64_t b = varlen ? 1 : s.batch;
  if (p.lse.defined()) n.lse = check_per_row("lse", p.lse, DType::kF32, b, s.h_q, s.rows_q, in.q.device, varlen);
  check_summary_query(p.summary_query, s, in.k);
  if (p.summaries.defined()) check_summaries(p.summaries, s, in.k.dtype, in.q.device);
  if (p.summaries_valid < 0 || p.summaries_valid > s.max_chunks) {
    throw InvalidArgument("summaries_valid", "in [0, " + str(s.max_chunks) + "] (complete chunks)", str(p.summaries_valid));
  }
  if (p.summaries_valid_per_seq != nullptr && !p.summaries.defined()) {
    throw InvalidArgument("summaries", "a caller-owned summary cache with summaries_valid_per_seq", "undefined");
  }
  if (p.summaries_valid > 0 && !p.summaries.defined()) {
    throw InvalidArgument("summaries", "a caller-owned summary cache when summaries_valid > 0", "undefined");
  }
  n.routing = check_routing(p.routing, s, in.q.device, varlen, false, false);
  if (p.workspace == nullptr && p.workspace_bytes != 0) {
    throw InvalidArgument("workspace", "non-null when workspace_bytes > 0", "null");
  }
  return n;
}

ProblemShape forward_shape(const ForwardParams& n) { return check_qkv(n.q, n.k, &n.v, n.batch, &n.method, 0.f).shape; }

SummarizeParams normalize_summarize(const SummarizeParams& p) {
  validate_method(p.method);
  SummarizeParams n = p;
  const bool varlen = p.batch.is_varlen();
  require_defined("k", p.k);
  n.k = to_rank4("k", p.k, varlen && !p.batch.is_paged());  // a page pool is rank 4 in a packed batch too
  check_attention_input("k", n.k, n.k.dtype, n.k.device);
  if (n.k.shape[3] < 1 || n.k.shape[3] > kMaxHeadDim) {
    throw InvalidArgument("k.shape[3] (head dim)", "in [1, 512]", str(n.k.shape[3]));
  }
  if (varlen && (p.batch.num_seqs < 1 || p.batch.max_seqlen_k < 1 || !p.batch.cu_seqlens_k)) {
    throw InvalidArgument("cu_seqlens_k", "non-null with num_seqs >= 1 and max_seqlen_k >= 1", "an incomplete varlen layout");
  }
  if (p.batch.is_paged()) {
    require_defined("summaries", p.summaries);
    if (p.summaries.rank != 4) throw InvalidArgument("summaries", "rank 4 [b, max_chunks, h_kv, d]", p.summaries.shape_string());
  }
  const ProblemShape s = summarize_shape(n);
  if (p.batch.is_paged()) {
    check_pages(p.batch, n.k, p.method.chunk_size, s.batch, n.k.device.type == DeviceType::kCpu);
  } else if (!varlen && p.batch.seqlens_k && n.k.device.type == DeviceType::kCpu) {
    // Stage 0 reads each sequence's keys up to its length: one past the padded rows would read past k.
    for (int64_t i = 0; i < s.batch; ++i) host_key_length(p.batch, i, s.n_k);
  }
  check_summary_query(p.summary_query, s, n.k);
  check_summaries(p.summaries, s, n.k.dtype, n.k.device);
  if (p.first_chunk < 0) throw InvalidArgument("first_chunk", ">= 0", str(p.first_chunk));
  if (p.first_chunks != nullptr && n.k.device.type == DeviceType::kCpu) {
    for (int64_t i = 0; i < s.batch; ++i) {
      if (p.first_chunks[i] < p.first_chunk) {
        throw InvalidArgument("first_chunks[" + str(i) + "]", ">= first_chunk = " + str(p.first_chunk),
                              str(p.first_chunks[i]));
      }
    }
  }
  return n;
}

ProblemShape summarize_shape(const SummarizeParams& n) {
  ProblemShape s;
  const bool varlen = n.batch.is_varlen(), paged = n.batch.is_paged();
  s.h_kv = n.k.shape[2];
  s.d = n.k.shape[3];
  // A padded batch's page pool has no batch axis: the summary cache's says how many sequences there are.
  s.batch = varlen ? n.batch.num_seqs : paged ? n.summaries.shape[0] : n.k.shape[0];
  s.n_k = varlen || paged ? n.batch.max_seqlen_k : n.k.shape[1];
  s.chunk = n.method.chunk_size;
  s.max_chunks = num_complete_chunks(s.n_k, s.chunk);
  return s;
}

RouteParams normalize_route(const RouteParams& p) {
  validate_method(p.method);
  RouteParams n = p;
  const bool varlen = p.batch.is_varlen();
  require_defined("q", p.q);
  n.q = to_rank4("q", p.q, varlen);
  check_attention_input("q", n.q, n.q.dtype, n.q.device);
  require_defined("summaries", p.summaries);
  const ProblemShape s = route_shape(n);
  check_summaries(p.summaries, s, p.summaries.dtype, n.q.device);
  if (!is_attention_dtype(p.summaries.dtype)) {
    throw InvalidArgument("summaries.dtype", "f32, f16 or bf16", dtype_name(p.summaries.dtype));
  }
  n.routing = check_routing(p.routing, s, n.q.device, varlen, true, true);
  return n;
}

ProblemShape route_shape(const RouteParams& p) {
  ProblemShape s;
  const bool varlen = p.batch.is_varlen();
  const TensorView q = to_rank4("q", p.q, varlen);
  s.h_q = q.shape[2];
  s.d = q.shape[3];
  s.h_kv = p.summaries.rank == 4 ? p.summaries.shape[2] : 0;
  if (s.h_kv < 1 || s.h_q % s.h_kv != 0) {
    throw InvalidArgument("summaries.shape[2] (KV heads)", "a divisor of the query heads h_q = " + str(s.h_q), str(s.h_kv));
  }
  s.group = s.h_q / s.h_kv;
  if (varlen) {
    if (!p.batch.cu_seqlens_q || !p.batch.cu_seqlens_k || p.batch.num_seqs < 1 || p.batch.max_seqlen_q < 1 ||
        p.batch.max_seqlen_k < 1) {
      throw InvalidArgument("batch", "cu_seqlens_q/k, num_seqs, max_seqlen_q/k all set for a varlen batch", "an incomplete varlen layout");
    }
    s.batch = p.batch.num_seqs;
    s.n_q = p.batch.max_seqlen_q;
    s.n_k = p.batch.max_seqlen_k;
  } else {
    s.batch = q.shape[0];
    s.n_q = q.shape[1];
    s.n_k = p.n_k;
    if (s.n_k < s.n_q) throw InvalidArgument("n_k", ">= n_q = " + str(s.n_q), str(s.n_k));
  }
  s.rows_q = q.shape[1];
  s.chunk = p.method.chunk_size;
  s.max_chunks = num_complete_chunks(s.n_k, s.chunk);
  s.mask_words = mask_words(s.n_k, s.chunk);
  s.scale = p.method.scale > 0 ? p.method.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
  return s;
}

AttendParams normalize_attend(const AttendParams& p) {
  validate_method(p.method);
  AttendParams n = p;
  Inputs in = check_qkv(p.q, p.k, &p.v, p.batch, &p.method, 0.f);
  const ProblemShape& s = in.shape;
  const bool varlen = p.batch.is_varlen();
  n.q = in.q;
  n.k = in.k;
  n.v = in.v;
  n.o = to_rank4("o", p.o, varlen);
  check_output("o", n.o, in.q);
  const int64_t b = varlen ? 1 : s.batch;
  if (p.lse.defined()) n.lse = check_per_row("lse", p.lse, DType::kF32, b, s.h_q, s.rows_q, in.q.device, varlen);
  const bool need_bias = p.method.prior != PriorMode::kNone;
  if (need_bias) check_summaries(p.summaries, s, in.k.dtype, in.q.device);
  n.routing = check_routing(p.routing, s, in.q.device, varlen, true, need_bias);
  return n;
}

ProblemShape attend_shape(const AttendParams& p) { return check_qkv(p.q, p.k, &p.v, p.batch, &p.method, 0.f).shape; }

DenseParams normalize_dense(const DenseParams& p) {
  if (!(p.scale >= 0.0f) || !std::isfinite(p.scale)) {
    throw InvalidArgument("scale", "a finite value > 0, or 0 for 1/sqrt(d)", std::to_string(p.scale));
  }
  DenseParams n = p;
  Inputs in = check_qkv(p.q, p.k, &p.v, p.batch, nullptr, p.scale);
  const bool varlen = p.batch.is_varlen();
  n.q = in.q;
  n.k = in.k;
  n.v = in.v;
  n.o = to_rank4("o", p.o, varlen);
  check_output("o", n.o, in.q);
  const int64_t b = varlen ? 1 : in.shape.batch;
  if (p.lse.defined()) n.lse = check_per_row("lse", p.lse, DType::kF32, b, in.shape.h_q, in.shape.rows_q, in.q.device, varlen);
  return n;
}

SequenceSpan sequence_span(const BatchLayout& batch, int64_t s, int64_t padded_n_q, int64_t padded_n_k) {
  SequenceSpan sp;
  sp.seq = s;
  if (batch.is_varlen()) {
    sp.batch_index = 0;
    sp.q_begin = batch.cu_seqlens_q[s];
    sp.n_q = batch.cu_seqlens_q[s + 1] - sp.q_begin;
    sp.k_begin = batch.cu_seqlens_k[s];
    sp.n_k = batch.cu_seqlens_k[s + 1] - sp.k_begin;
    return sp;
  }
  sp.batch_index = s;
  sp.n_q = batch.seqlens_q ? batch.seqlens_q[s] : padded_n_q;
  sp.n_k = batch.seqlens_k ? batch.seqlens_k[s] : padded_n_k;
  return sp;
}

}  // namespace dashattn
