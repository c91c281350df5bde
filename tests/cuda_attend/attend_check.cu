// Conformance grid of the CUDA Stage-2 kernels against a float64 host reference written from semantics.md:
// every query attends the keys of its routed chunks (bias d = prior_bias(log w_c)) plus the visible keys of its
// diagonal chunk (d = 0), softmax in float64; padding rows must read o = 0 and lse = -inf.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "attend_check.h"
#include "cuda_check.h"
#include "attend_launch.cuh"
#include "bias_lists.cuh"
#include "dashattn/geometry.h"

using namespace dashattn;
using dashattn::cuda::AttendArgs;
using dashattn::cuda::AttendPlan;


namespace attend_check {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    s += 0x9e3779b97f4a7c15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {
    const double u = std::max(uniform(), 1e-300), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

struct Case {
  std::string name;
  int d = 128;
  DType dtype = DType::kBF16;
  DType o_dtype = DType::kBF16;
  int h_q = 16, h_kv = 1, chunk = 64;
  std::vector<int> n_q{300}, n_k{300};
  bool varlen = false, bhnd = false, lengths = false;
  PriorMode prior = PriorMode::kNone;
  float sigma = 2.0f;
  double keep = 0.3;
  bool dense = false;
  bool chunk_masks = false;  // all queries of a chunk share the routing draw (the locality real routing has)
  // > 0: no random draw; every token routes every chunk except a run of gap_run chunks out of each 16, at 4 .. for
  // the first four tokens of each 8-token row block (one warpgroup's rows at g = 16) and at 10 .. for the last
  // four. The tokens share most tiles (the warpgroup tiling), and each warpgroup attends none of gap_run union
  // tiles in a row, which the other warpgroup attends: a consumer that held a stage while it waited for a tile
  // in that stage's next round hung there.
  int gap_run = 0;
  int warps = 0;   // 0: the planner's choice
  int splits = 0;  // 0: the planner's choice
  int stages = 0;  // K/V ring depth of the wide tilings (3 or 4), 0: the launcher's choice
  bool bias_table = true;  // false: the consumer bias per tile (the warpgroup tiling then runs per warp)
  // The d = 128 warpgroup tiling's persistent kernel: 0 the planner's choice, -1 off, n > 0 on with n CTAs (each
  // then walks many items). A case with n > 0 is also run with it off, and the outputs must agree bitwise.
  int persistent = 0;
  bool fixed_order = false;  // no workspace: the persistent kernel's items in a fixed order instead of a counter
  // > 0: K and V are read from pools of pages of this many keys through a block table (pages shuffled, spare pages
  // and unused table entries NaN); the outputs must be bitwise those of the contiguous run.
  int page_size = 0;
  // Stage 1's bias lists (bias_lists.cuh) beside the routing inputs, as forward() hands them over: each row's
  // routed chunks with log w in float from the reference's weights, kNoList past kBiasListCap chunks and for every
  // list_drop-th token (0: none), and poisoned entries past each count (a chunk far out of range, NaN). The wide
  // tilings then fill their bias table from them where every token of a CTA has one; the others ignore them.
  bool lists = false;
  int list_drop = 0;
};

// Host copy of a 16-bit or f32 tensor with its element strides.
struct HostTensor {
  std::vector<uint16_t> h16;
  std::vector<float> f32;
  DType dtype;
  int64_t shape[4]{1, 1, 1, 1}, stride[4]{0, 0, 0, 0};
  void* dev = nullptr;
  size_t elems() const { return size_t(shape[0]) * shape[1] * shape[2] * shape[3]; }
  size_t bytes() const { return elems() * dtype_size(dtype); }
  int64_t off(int64_t a, int64_t b, int64_t c, int64_t d = 0) const {
    return a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3];
  }
  double at(int64_t o) const {
    if (dtype == DType::kF32) return f32[o];
    return dtype == DType::kBF16 ? bf16_to_float(h16[o]) : f16_to_float(h16[o]);
  }
  void alloc_host() {
    if (dtype == DType::kF32 || dtype == DType::kU32 || dtype == DType::kI32) f32.assign(elems(), 0.0f);
    else h16.assign(elems(), 0);
  }
  void* host_ptr() { return h16.empty() ? static_cast<void*>(f32.data()) : static_cast<void*>(h16.data()); }
  void upload() {
    CK(cudaMalloc(&dev, bytes()));
    CK(cudaMemcpy(dev, host_ptr(), bytes(), cudaMemcpyHostToDevice));
  }
  void download() { CK(cudaMemcpy(host_ptr(), dev, bytes(), cudaMemcpyDeviceToHost)); }
  void release() {
    if (dev) cudaFree(dev);
    dev = nullptr;
  }
  TensorView view(int rank) const {
    TensorView v;
    v.data = dev;
    v.dtype = dtype;
    v.device = Device{DeviceType::kCuda, 0};
    v.rank = rank;
    for (int i = 0; i < rank; ++i) {
      v.shape[i] = shape[i];
      v.stride[i] = stride[i];
    }
    return v;
  }
};

// [B, n, h, d] tensor, optionally stored as [B, h, n, d].
HostTensor make_bnhd(DType t, int64_t B, int64_t n, int64_t h, int64_t d, bool bhnd) {
  HostTensor x;
  x.dtype = t;
  x.shape[0] = B; x.shape[1] = n; x.shape[2] = h; x.shape[3] = d;
  if (bhnd) { x.stride[0] = h * n * d; x.stride[1] = d; x.stride[2] = n * d; x.stride[3] = 1; }
  else { x.stride[0] = n * h * d; x.stride[1] = h * d; x.stride[2] = d; x.stride[3] = 1; }
  x.alloc_host();
  return x;
}
HostTensor make_rows(DType t, int64_t B, int64_t h, int64_t rows, int64_t words = 1) {
  HostTensor x;
  x.dtype = t;
  x.shape[0] = B; x.shape[1] = h; x.shape[2] = rows; x.shape[3] = words;
  x.stride[3] = 1; x.stride[2] = words; x.stride[1] = rows * words; x.stride[0] = h * rows * words;
  x.alloc_host();
  return x;
}

void fill_random(HostTensor& x, Rng& rng, double scale) {
  for (auto& e : x.h16) {
    const float f = float(rng.normal() * scale);
    e = x.dtype == DType::kBF16 ? float_to_bf16(f) : float_to_f16(f);
  }
}

struct Outcome {
  double rel_l2 = 0, max_abs = 0, lse_err = 0;
  bool finite = true, padding_ok = true;
  uint64_t digest = 0;  // of the bits of o and lse
};

uint64_t fnv1a(uint64_t h, const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// K and V moved into pools of `page` keys each ([pages, page, h_kv, d], bnhd): every sequence's pages in a shuffled
// order, a spare NaN page, and the table's unused entries pointing at it, so a wrong page or row shows in o.
// (Not tests/reference/paged.h: these checks also build with nvcc alone, see run_device.sh, without that library.)
struct PagedKv {
  HostTensor k, v;
  int32_t* d_table = nullptr;
  int64_t width = 0;
};
template <class KeyRowOf, class BatchOf>
PagedKv make_paged_kv(const HostTensor& k, const HostTensor& v, int page, const std::vector<int>& n_k,
                      const KeyRowOf& krow, const BatchOf& bidx, uint64_t seed) {
  PagedKv p;
  const int B = int(n_k.size());
  const int64_t h = k.shape[2], d = k.shape[3];
  std::vector<int64_t> first{0};
  for (int s = 0; s < B; ++s) {
    const int64_t pages = (n_k[s] + page - 1) / page;
    p.width = std::max(p.width, pages);
    first.push_back(first.back() + pages);
  }
  const int64_t spare = first.back(), total = spare + 1;
  std::vector<int32_t> pages_in_order(static_cast<size_t>(spare));
  std::iota(pages_in_order.begin(), pages_in_order.end(), 0);
  Rng rng{seed ^ 0x5bd1e995u};
  for (int64_t i = spare - 1; i > 0; --i) {
    const int64_t other = int64_t(rng.next() % uint64_t(i + 1));
    std::swap(pages_in_order[static_cast<size_t>(i)], pages_in_order[static_cast<size_t>(other)]);
  }
  p.width += 1;  // one column past the longest sequence, unused
  std::vector<int32_t> table(size_t(B * p.width), int32_t(spare));
  for (HostTensor* pool : {&p.k, &p.v}) {
    *pool = make_bnhd(k.dtype, total, page, h, d, false);
    std::fill(pool->h16.begin(), pool->h16.end(), uint16_t(0x7fff));
  }
  for (int s = 0; s < B; ++s) {
    for (int64_t j = 0; j < n_k[s]; ++j) {
      const int32_t pg = pages_in_order[static_cast<size_t>(first[s] + j / page)];
      table[size_t(s * p.width + j / page)] = pg;
      for (int hh = 0; hh < h; ++hh)
        for (int64_t e = 0; e < d; ++e) {
          p.k.h16[size_t(p.k.off(pg, j % page, hh, e))] = k.h16[size_t(k.off(bidx(s), krow(s, j), hh, e))];
          p.v.h16[size_t(p.v.off(pg, j % page, hh, e))] = v.h16[size_t(v.off(bidx(s), krow(s, j), hh, e))];
        }
    }
  }
  p.k.upload();
  p.v.upload();
  CK(cudaMalloc(&p.d_table, table.size() * 4));
  CK(cudaMemcpy(p.d_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  return p;
}

Outcome run_case(const Case& c, uint64_t seed) {
  Rng rng{seed};
  const int B = int(c.n_q.size());
  const int g = c.h_q / c.h_kv;
  const int C = c.chunk;
  const int64_t NQ = *std::max_element(c.n_q.begin(), c.n_q.end());
  const int64_t NK = *std::max_element(c.n_k.begin(), c.n_k.end());
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (int s = 0; s < B; ++s) {
    cu_q.push_back(cu_q.back() + c.n_q[s]);
    cu_k.push_back(cu_k.back() + c.n_k[s]);
  }
  // Varlen sequences live in [1, total, h, d]; padded ones in [B, N, h, d].
  const int64_t TB = c.varlen ? 1 : B;
  const int64_t TQ = c.varlen ? cu_q.back() : NQ;
  const int64_t TK = c.varlen ? cu_k.back() : NK;
  auto qrow = [&](int s, int64_t i) { return c.varlen ? cu_q[s] + i : i; };
  auto krow = [&](int s, int64_t j) { return c.varlen ? cu_k[s] + j : j; };
  auto bidx = [&](int s) { return c.varlen ? 0 : s; };

  HostTensor q = make_bnhd(c.dtype, TB, TQ, c.h_q, c.d, c.bhnd);
  HostTensor k = make_bnhd(c.dtype, TB, TK, c.h_kv, c.d, c.bhnd);
  HostTensor v = make_bnhd(c.dtype, TB, TK, c.h_kv, c.d, c.bhnd);
  HostTensor o = make_bnhd(c.o_dtype, TB, TQ, c.h_q, c.d, c.bhnd);
  fill_random(q, rng, 1.0);
  fill_random(k, rng, 1.0);
  fill_random(v, rng, 1.0);
  // Poison o: NaN everywhere, so an unwritten element fails.
  if (c.o_dtype == DType::kF32) std::fill(o.f32.begin(), o.f32.end(), NAN);
  else std::fill(o.h16.begin(), o.h16.end(), uint16_t(0x7fff));
  const int64_t words = mask_words(NK, C);
  HostTensor mask = make_rows(DType::kU32, TB, c.h_kv, TQ, words);
  HostTensor lse = make_rows(DType::kF32, TB, c.h_q, TQ);
  std::fill(lse.f32.begin(), lse.f32.end(), NAN);
  HostTensor tau = make_rows(DType::kF32, TB, c.h_q, TQ);
  HostTensor mu = make_rows(DType::kF32, TB, c.h_kv, TQ);
  const int64_t max_chunks = std::max<int64_t>(NK / C, 1);
  HostTensor summ = make_bnhd(c.dtype, B, max_chunks, c.h_kv, c.d, false);
  fill_random(summ, rng, 1.0);

  auto mask_word = [&](int s, int r, int64_t i, int64_t w) -> uint32_t& {
    return *reinterpret_cast<uint32_t*>(&mask.f32[mask.off(bidx(s), r, qrow(s, i), w)]);
  };
  const double inv_sqrt_d = 1.0 / std::sqrt(double(c.d));
  const double alpha = 1.5, gamma = 1.3;
  // x_{h,c} = (alpha - 1) * gamma * <q_h, kbar_c> / sqrt(d), as Stage 1 scores them.
  auto x_of = [&](int s, int64_t i, int h, int64_t ch) {
    double dot = 0;
    const int r = h / g;
    for (int e = 0; e < c.d; ++e)
      dot += q.at(q.off(bidx(s), qrow(s, i), h, e)) * summ.at(summ.off(s, ch, r, e));
    return (alpha - 1.0) * gamma * dot * inv_sqrt_d;
  };
  for (int s = 0; s < B; ++s) {
    for (int64_t i = 0; i < c.n_q[s]; ++i) {
      const int64_t p = c.n_k[s] - c.n_q[s] + i;
      const int64_t ci = p / C;
      const bool same_chunk_as_previous = c.chunk_masks && i > 0 && (p - 1) / C == ci;
      for (int r = 0; r < c.h_kv; ++r) {
        if (same_chunk_as_previous) {
          for (int64_t w = 0; w < words; ++w) mask_word(s, r, i, w) = mask_word(s, r, i - 1, w);
        } else if (c.gap_run > 0) {
          const int64_t gap = i % 8 < 4 ? 4 : 10;
          for (int64_t ch = 0; ch < ci; ++ch)
            if (ch % 16 < gap || ch % 16 >= gap + c.gap_run) mask_word(s, r, i, ch / 32) |= 1u << (ch % 32);
        } else {
          for (int64_t ch = 0; ch < ci; ++ch)
            if (rng.uniform() < c.keep) mask_word(s, r, i, ch / 32) |= 1u << (ch % 32);
        }
        mask_word(s, r, i, ci / 32) |= 1u << (ci % 32);  // the diagonal bit, as Stage 1 writes it
        mu.f32[mu.off(bidx(s), r, qrow(s, i))] = float(rng.normal());
      }
      if (c.prior != PriorMode::kNone) {
        // tau below every score: all weights are comfortably positive, so float vs double cannot flip a sign.
        for (int h = 0; h < c.h_q; ++h) {
          double mn = 0;
          for (int64_t ch = 0; ch < ci; ++ch) mn = ch == 0 ? x_of(s, i, h, ch) : std::min(mn, x_of(s, i, h, ch));
          tau.f32[tau.off(bidx(s), h, qrow(s, i))] = float(mn - 0.25);
        }
      }
    }
  }

  // The group weight of chunk ch for token i's KV head r (α = 1.5: the heads' (x − τ)_+² averaged), floored where it
  // underflows as Stage 2 floors it (the mask bit decides).
  auto group_weight_of = [&](int s, int64_t i, int r, int64_t ch) {
    double w = 0;
    for (int hh = r * g; hh < (r + 1) * g; ++hh) {
      const double y = x_of(s, i, hh, ch) - tau.f32[tau.off(bidx(s), hh, qrow(s, i))];
      w += y > 0 ? y * y : 0.0;
    }
    w /= g;
    return w > 0 ? w : 1e-30;
  };

  // Float64 reference.
  const double scale = 1.0 / std::sqrt(double(c.d));
  std::vector<double> ref(size_t(TB) * TQ * c.h_q * c.d, 0.0), ref_lse(size_t(TB) * TQ * c.h_q, -INFINITY);
  auto ref_index = [&](int s, int64_t i, int h) { return (size_t(bidx(s)) * TQ + qrow(s, i)) * c.h_q + h; };
  for (int s = 0; s < B; ++s) {
    for (int64_t i = 0; i < c.n_q[s]; ++i) {
      const int64_t p = c.n_k[s] - c.n_q[s] + i;
      const int64_t ci = p / C;
      for (int h = 0; h < c.h_q; ++h) {
        const int r = h / g;
        std::vector<std::pair<int64_t, double>> keys;  // key, bias
        for (int64_t ch = 0; ch < ci; ++ch) {
          const bool routed = c.dense || ((mask_word(s, r, i, ch / 32) >> (ch % 32)) & 1u);
          if (!routed) continue;
          double bias = 0;
          if (!c.dense && c.prior != PriorMode::kNone) {
            const double w = group_weight_of(s, i, r, ch);
            bias = c.prior == PriorMode::kRaw ? std::log(w)
                                              : (std::log(w) - mu.f32[mu.off(bidx(s), r, qrow(s, i))]) / c.sigma;
          }
          for (int64_t j = ch * C; j < ch * C + C; ++j) keys.push_back({j, bias});
        }
        for (int64_t j = ci * C; j <= p; ++j) keys.push_back({j, 0.0});
        std::vector<double> logit(keys.size());
        double mx = -INFINITY;
        for (size_t t = 0; t < keys.size(); ++t) {
          double dot = 0;
          for (int e = 0; e < c.d; ++e)
            dot += q.at(q.off(bidx(s), qrow(s, i), h, e)) * k.at(k.off(bidx(s), krow(s, keys[t].first), r, e));
          logit[t] = dot * scale + keys[t].second;
          mx = std::max(mx, logit[t]);
        }
        double sum = 0;
        for (auto& l : logit) sum += std::exp(l - mx);
        const size_t base = ref_index(s, i, h);
        for (size_t t = 0; t < keys.size(); ++t) {
          const double pr = std::exp(logit[t] - mx) / sum;
          for (int e = 0; e < c.d; ++e)
            ref[base * c.d + e] += pr * v.at(v.off(bidx(s), krow(s, keys[t].first), r, e));
        }
        ref_lse[base] = mx + std::log(sum);
      }
    }
  }

  // Stage 1's lists of these masks (rows indexed like μ), from the reference's group weights.
  const int64_t list_rows = int64_t(mu.elems());
  std::vector<int32_t> list_counts(size_t(list_rows), dashattn::cuda::kNoList);
  std::vector<int2> list_entries(size_t(list_rows) * dashattn::cuda::kBiasListCap, int2{0x7fffffff, 0x7fc00000});
  if (c.lists) {
    for (int s = 0; s < B; ++s)
      for (int64_t i = 0; i < c.n_q[s]; ++i) {
        const int64_t ci = (c.n_k[s] - c.n_q[s] + i) / C;
        for (int r = 0; r < c.h_kv; ++r) {
          const int64_t row = mu.off(bidx(s), r, qrow(s, i));
          int32_t n = 0;
          for (int64_t ch = 0; ch < ci; ++ch) {
            if (!((mask_word(s, r, i, ch / 32) >> (ch % 32)) & 1u)) continue;
            const double w = group_weight_of(s, i, r, ch);
            const float lw = float(std::log(w));
            int32_t bits;
            std::memcpy(&bits, &lw, 4);
            if (n < dashattn::cuda::kBiasListCap)
              list_entries[size_t(row) * dashattn::cuda::kBiasListCap + n] = int2{int32_t(ch), bits};
            ++n;
          }
          const bool dropped = c.list_drop > 0 && i % c.list_drop == c.list_drop - 1;
          list_counts[size_t(row)] = n <= dashattn::cuda::kBiasListCap && !dropped ? n : dashattn::cuda::kNoList;
        }
      }
  }

  // Device run.
  for (HostTensor* t : {&q, &k, &v, &o, &mask, &lse, &tau, &mu, &summ}) t->upload();
  void* d_lists = nullptr;
  dashattn::cuda::BiasLists lists;
  if (c.lists) {
    CK(cudaMalloc(&d_lists, dashattn::cuda::bias_lists_bytes(list_rows)));
    lists = dashattn::cuda::carve_bias_lists(d_lists, list_rows);
    CK(cudaMemcpy(lists.counts, list_counts.data(), list_counts.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(lists.entries, list_entries.data(), list_entries.size() * sizeof(int2), cudaMemcpyHostToDevice));
  }
  PagedKv paged;
  if (c.page_size > 0) paged = make_paged_kv(k, v, c.page_size, c.n_k, krow, bidx, seed);
  int32_t *d_cu_q = nullptr, *d_cu_k = nullptr, *d_len_q = nullptr, *d_len_k = nullptr;
  BatchLayout batch;
  if (c.varlen) {
    CK(cudaMalloc(&d_cu_q, cu_q.size() * 4));
    CK(cudaMalloc(&d_cu_k, cu_k.size() * 4));
    CK(cudaMemcpy(d_cu_q, cu_q.data(), cu_q.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_cu_k, cu_k.data(), cu_k.size() * 4, cudaMemcpyHostToDevice));
    batch.cu_seqlens_q = d_cu_q;
    batch.cu_seqlens_k = d_cu_k;
    batch.num_seqs = B;
    batch.max_seqlen_q = int(NQ);
    batch.max_seqlen_k = int(NK);
  } else if (c.lengths || *std::min_element(c.n_q.begin(), c.n_q.end()) != NQ ||
             *std::min_element(c.n_k.begin(), c.n_k.end()) != NK) {
    // Sequences of different lengths in a padded batch need their lengths.
    CK(cudaMalloc(&d_len_q, B * 4));
    CK(cudaMalloc(&d_len_k, B * 4));
    CK(cudaMemcpy(d_len_q, c.n_q.data(), B * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_len_k, c.n_k.data(), B * 4, cudaMemcpyHostToDevice));
    batch.seqlens_q = d_len_q;
    batch.seqlens_k = d_len_k;
  }
  if (c.page_size > 0) {
    batch.block_table = paged.d_table;
    batch.block_table_stride = paged.width;
    batch.max_seqlen_k = int(NK);
  }
  ProblemShape shape;
  shape.batch = B;
  shape.n_q = NQ;
  shape.n_k = NK;
  shape.rows_q = TQ;
  shape.h_q = c.h_q;
  shape.h_kv = c.h_kv;
  shape.group = g;
  shape.d = c.d;
  shape.chunk = C;
  shape.max_chunks = NK / C;
  shape.mask_words = words;
  shape.scale = float(scale);

  AttendArgs args;
  if (c.dense) {
    DenseParams dp;
    dp.q = q.view(4); dp.k = k.view(4); dp.v = v.view(4); dp.o = o.view(4); dp.lse = lse.view(3);
    dp.batch = batch;
    args = dashattn::cuda::make_dense_args(dp, shape);
  } else {
    AttendParams ap;
    ap.q = q.view(4); ap.k = k.view(4); ap.v = v.view(4); ap.o = o.view(4); ap.lse = lse.view(3);
    if (c.page_size > 0) {
      ap.k = paged.k.view(4);
      ap.v = paged.v.view(4);
    }
    ap.summaries = summ.view(4);
    ap.routing.mask = mask.view(4);
    ap.routing.tau = tau.view(3);
    ap.routing.mu = mu.view(3);
    ap.batch = batch;
    ap.method.chunk_size = C;
    ap.method.alpha = float(alpha);
    ap.method.gamma = float(gamma);
    ap.method.sigma = c.sigma;
    ap.method.prior = c.prior;
    args = dashattn::cuda::make_attend_args(ap, shape);
    if (c.lists) args.lists = dashattn::cuda::bias_lists_for(&lists, args.mu, c.prior);
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  AttendPlan plan = dashattn::cuda::plan_attend(shape, sms, c.dense);
  if (c.warps) plan.warps = c.warps;
  plan.bias_table = c.bias_table;
  if (c.splits) plan.num_splits = c.splits;
  if (c.stages) plan.stages = c.stages;
  if (c.persistent < 0) plan.persistent = false;
  if (c.persistent > 0) plan.persistent_ctas = c.persistent;
  // The split partials, or without a split the persistent kernel's item counter (none: its fixed item order).
  void* ws = nullptr;
  if (plan.num_splits > 1) {
    const size_t bytes = size_t(plan.num_splits) * B * c.h_q * NQ * (c.d + 1) * 4 + 512;
    CK(cudaMalloc(&ws, bytes));
  } else if (plan.persistent && !c.fixed_order) {
    CK(cudaMalloc(&ws, dashattn::cuda::kItemCounterBytes));
  }
  dashattn::cuda::launch_attend_planned(args, c.d, c.dtype, plan, ws, nullptr);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  o.download();
  lse.download();

  Outcome out;
  out.digest = fnv1a(fnv1a(14695981039346656037ull, o.host_ptr(), o.bytes()), lse.host_ptr(), lse.bytes());
  double num = 0, den = 0;
  for (int s = 0; s < B; ++s) {
    const int64_t rows = c.varlen ? c.n_q[s] : NQ;
    for (int64_t i = 0; i < rows; ++i) {
      for (int h = 0; h < c.h_q; ++h) {
        const size_t base = ref_index(s, i, h);
        const double l = lse.f32[lse.off(bidx(s), h, qrow(s, i))];
        if (i >= c.n_q[s]) {  // padding row of a padded batch
          if (!(l == -INFINITY)) out.padding_ok = false;
          for (int e = 0; e < c.d; ++e)
            if (o.at(o.off(bidx(s), qrow(s, i), h, e)) != 0.0) out.padding_ok = false;
          continue;
        }
        if (!std::isfinite(l)) out.finite = false;
        out.lse_err = std::max(out.lse_err, std::fabs(l - ref_lse[base]));
        for (int e = 0; e < c.d; ++e) {
          const double got = o.at(o.off(bidx(s), qrow(s, i), h, e));
          const double want = ref[base * c.d + e];
          if (!std::isfinite(got)) out.finite = false;
          num += (got - want) * (got - want);
          den += want * want;
          out.max_abs = std::max(out.max_abs, std::fabs(got - want));
        }
      }
    }
  }
  out.rel_l2 = std::sqrt(num / std::max(den, 1e-30));
  for (HostTensor* t : {&q, &k, &v, &o, &mask, &lse, &tau, &mu, &summ, &paged.k, &paged.v}) t->release();
  for (void* p : {static_cast<void*>(d_cu_q), static_cast<void*>(d_cu_k), static_cast<void*>(d_len_q),
                  static_cast<void*>(d_len_k), static_cast<void*>(paged.d_table), ws, d_lists})
    if (p) cudaFree(p);
  return out;
}

std::vector<Case> conformance_cases() {
  std::vector<Case> cs;
  auto add = [&](Case c) { cs.push_back(c); return &cs.back(); };
  Case base;
  base.name = "d128 bf16 g16 C64 n300";
  add(base);
  { Case c = base; c.name = "d128 bf16 g16 4 warps"; c.warps = 4; add(c); }
  { Case c = base; c.name = "d128 bf16 g16 1 warp"; c.warps = 1; add(c); }
  { Case c = base; c.name = "d128 f16 g16 split 3"; c.dtype = c.o_dtype = DType::kF16; c.splits = 3; add(c); }
  { Case c = base; c.name = "g1 C32 n200"; c.h_q = 4; c.h_kv = 4; c.chunk = 32; c.n_q = {200}; c.n_k = {200}; add(c); }
  { Case c = base; c.name = "g4 C16 n257"; c.h_q = 8; c.h_kv = 2; c.chunk = 16; c.n_q = {257}; c.n_k = {257}; add(c); }
  { Case c = base; c.name = "g32 C128 n400"; c.h_q = 32; c.h_kv = 1; c.chunk = 128; c.n_q = {400}; c.n_k = {400}; c.keep = 0.5; add(c); }
  { Case c = base; c.name = "g6 C64 n333"; c.h_q = 12; c.h_kv = 2; c.n_q = {333}; c.n_k = {333}; add(c); }
  { Case c = base; c.name = "d64 f16 g8 bhnd"; c.d = 64; c.dtype = c.o_dtype = DType::kF16; c.h_q = 8; c.n_q = {500}; c.n_k = {500}; c.bhnd = true; add(c); }
  { Case c = base; c.name = "d256 bf16 g16"; c.d = 256; c.n_q = {200}; c.n_k = {200}; add(c); }
  { Case c = base; c.name = "d256 bf16 g16 decode split"; c.d = 256; c.n_q = {1, 1}; c.n_k = {3000, 1700}; add(c); }
  { Case c = base; c.name = "decode n_q1 b3 auto split"; c.n_q = {1, 1, 1}; c.n_k = {5000, 4000, 64}; add(c); }
  { Case c = base; c.name = "decode n_q1 b3 split 7"; c.n_q = {1, 1, 1}; c.n_k = {5000, 4000, 64}; c.splits = 7; c.lengths = true; add(c); }
  { Case c = base; c.name = "decode n_q3 g16 split 4"; c.n_q = {3, 3}; c.n_k = {2000, 999}; c.splits = 4; add(c); }
  // One token per CTA over a union of more than 32 words (140K keys) beside a short sequence in one launch, and at
  // C = 16 (four chunks per tile) with a partial last tile and a sequence shorter than its splits.
  { Case c = base; c.name = "decode n_q1 union of 69 words split 5"; c.n_q = {1, 1}; c.n_k = {140000, 3000}; c.splits = 5; add(c); }
  { Case c = base; c.name = "decode n_q1 C16 split 3"; c.chunk = 16; c.n_q = {1, 1, 1}; c.n_k = {4100, 70, 2049}; c.splits = 3; add(c); }
  { Case c = base; c.name = "padded lengths"; c.h_q = 8; c.h_kv = 2; c.n_q = {100, 37, 64}; c.n_k = {100, 80, 200}; c.lengths = true; add(c); }
  { Case c = base; c.name = "varlen"; c.h_q = 8; c.h_kv = 2; c.n_q = {50, 130, 1}; c.n_k = {50, 130, 700}; c.varlen = true; add(c); }
  { Case c = base; c.name = "varlen decode split"; c.n_q = {1, 2, 1}; c.n_k = {900, 3000, 65}; c.varlen = true; c.splits = 5; add(c); }
  { Case c = base; c.name = "prior raw g16 C64"; c.prior = PriorMode::kRaw; c.n_q = {200}; c.n_k = {200}; add(c); }
  { Case c = base; c.name = "prior raw g4 C32"; c.prior = PriorMode::kRaw; c.h_q = 8; c.h_kv = 2; c.chunk = 32; c.n_q = {150}; c.n_k = {150}; add(c); }
  { Case c = base; c.name = "prior estimate g16 C16"; c.prior = PriorMode::kEstimateDiagonal; c.chunk = 16; c.n_q = {120}; c.n_k = {120}; add(c); }
  { Case c = base; c.name = "prior estimate decode split"; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {1, 1}; c.n_k = {1500, 700}; c.splits = 3; add(c); }
  // The bias by the consumer warps (g divides 16) on every tiling and head dim, and by the producer warp (g = 6, 32).
  { Case c = base; c.name = "prior raw g16 7 warps"; c.prior = PriorMode::kRaw; c.warps = 7; c.n_q = {230}; c.n_k = {230}; add(c); }
  { Case c = base; c.name = "prior estimate g1 d64 C32"; c.prior = PriorMode::kEstimateDiagonal; c.d = 64; c.h_q = 4; c.h_kv = 4; c.chunk = 32; c.n_q = {200}; c.n_k = {200}; add(c); }
  { Case c = base; c.name = "prior raw g2 d256 C128"; c.prior = PriorMode::kRaw; c.d = 256; c.h_q = 4; c.h_kv = 2; c.chunk = 128; c.n_q = {300}; c.n_k = {420}; add(c); }
  { Case c = base; c.name = "prior raw g16 7 warps per tile"; c.prior = PriorMode::kRaw; c.warps = 7; c.bias_table = false; c.chunk_masks = true; c.n_q = {230}; c.n_k = {290}; add(c); }
  { Case c = base; c.name = "prior est g4 C16 1 warp per tile"; c.prior = PriorMode::kEstimateDiagonal; c.warps = 1; c.bias_table = false; c.h_q = 8; c.h_kv = 2; c.chunk = 16; c.n_q = {150}; c.n_k = {150}; add(c); }
  { Case c = base; c.name = "prior raw g6 (producer bias)"; c.prior = PriorMode::kRaw; c.h_q = 12; c.h_kv = 2; c.n_q = {333}; c.n_k = {333}; add(c); }
  { Case c = base; c.name = "prior est g32 C16 (producer)"; c.prior = PriorMode::kEstimateDiagonal; c.h_q = 32; c.h_kv = 1; c.chunk = 16; c.n_q = {150}; c.n_k = {150}; add(c); }
  { Case c = base; c.name = "dense g16"; c.dense = true; add(c); }
  { Case c = base; c.name = "dense g2 d64 decode"; c.dense = true; c.d = 64; c.h_q = 4; c.h_kv = 2; c.n_q = {1, 4}; c.n_k = {3000, 2500}; add(c); }
  { Case c = base; c.name = "o f32"; c.o_dtype = DType::kF32; c.n_q = {130}; c.n_k = {190}; add(c); }
  // The warpgroup (wgmma) tiling of d = 128: 8 consumer warps, 4 tokens per warpgroup (the mma.sync path where
  // wgmma is not available).
  { Case c = base; c.name = "wgmma g16 n300"; c.warps = 8; add(c); }
  { Case c = base; c.name = "wgmma f16 prior raw"; c.warps = 8; c.dtype = c.o_dtype = DType::kF16; c.prior = PriorMode::kRaw; c.n_q = {200}; c.n_k = {260}; add(c); }
  { Case c = base; c.name = "wgmma dense"; c.warps = 8; c.dense = true; c.n_q = {333}; c.n_k = {333}; add(c); }
  { Case c = base; c.name = "wgmma g4 C16 estimate"; c.warps = 8; c.h_q = 8; c.h_kv = 2; c.chunk = 16; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {257}; c.n_k = {257}; add(c); }
  { Case c = base; c.name = "wgmma varlen"; c.warps = 8; c.h_q = 32; c.h_kv = 2; c.n_q = {50, 190, 3}; c.n_k = {50, 190, 700}; c.varlen = true; add(c); }
  { Case c = base; c.name = "wgmma chunk masks raw"; c.warps = 8; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {400}; c.n_k = {400}; add(c); }
  { Case c = base; c.name = "wgmma chunk masks C16 est"; c.warps = 8; c.chunk_masks = true; c.chunk = 16; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {300}; c.n_k = {330}; add(c); }
  { Case c = base; c.name = "wgmma chunk masks raw producer"; c.warps = 8; c.chunk_masks = true; c.bias_table = false; c.prior = PriorMode::kRaw; c.n_q = {300}; c.n_k = {300}; add(c); }
  { Case c = base; c.name = "wgmma chunk masks g8 f16"; c.warps = 8; c.chunk_masks = true; c.h_q = 16; c.h_kv = 2; c.dtype = c.o_dtype = DType::kF16; c.prior = PriorMode::kRaw; c.n_q = {260}; c.n_k = {260}; add(c); }
  // The warpgroup tiling with the consumer bias: padded batch, n_q < n_k, C = 128 and varlen, partial last tiles.
  { Case c = base; c.name = "wgmma chunk masks est lengths"; c.warps = 8; c.chunk_masks = true; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {150, 333}; c.n_k = {300, 333}; c.lengths = true; add(c); }
  { Case c = base; c.name = "wgmma chunk masks C128 varlen"; c.warps = 8; c.chunk_masks = true; c.chunk = 128; c.prior = PriorMode::kRaw; c.n_q = {90, 260}; c.n_k = {500, 260}; c.varlen = true; add(c); }
  { Case c = base; c.name = "wgmma padded o f32"; c.warps = 8; c.o_dtype = DType::kF32; c.n_q = {100, 37}; c.n_k = {100, 300}; c.lengths = true; c.bhnd = true; add(c); }
  // Long key ranges with dense routing: more (tile, chunk) bias pairs per CTA than one staged round of k̄ columns
  // holds (the table is built in several rounds, the ring reused between them).
  { Case c = base; c.name = "wgmma table rounds C16 raw"; c.warps = 8; c.chunk_masks = true; c.chunk = 16; c.prior = PriorMode::kRaw; c.keep = 0.9; c.n_q = {70}; c.n_k = {9000}; add(c); }
  { Case c = base; c.name = "table rounds 4 warps C16 est"; c.warps = 4; c.chunk = 16; c.prior = PriorMode::kEstimateDiagonal; c.keep = 0.8; c.h_q = 8; c.h_kv = 2; c.n_q = {40}; c.n_k = {12000}; add(c); }
  // Warpgroups whose 64 rows cut tokens (g = 6) or share one token (g = 32): each skips only the tiles none of its
  // own rows attend.
  // 64 tokens per CTA: the record warp's walk for blocks of more than 32 tokens (attend_tile_records).
  { Case c = base; c.name = "wgmma g2 chunk masks raw"; c.warps = 8; c.h_q = 4; c.h_kv = 2; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {300}; c.n_k = {300}; add(c); }
  { Case c = base; c.name = "wgmma g6 tokens across warpgroups"; c.warps = 8; c.h_q = 12; c.h_kv = 2; c.prior = PriorMode::kRaw; c.n_q = {333}; c.n_k = {333}; add(c); }
  { Case c = base; c.name = "wgmma g32 one token per CTA"; c.warps = 8; c.h_q = 32; c.h_kv = 1; c.keep = 0.4; c.n_q = {140}; c.n_k = {260}; add(c); }
  // Warpgroups over padded sequences with chunk masks: in sequence 0 a warpgroup that attends every tile of its
  // CTA ends in padding rows that are written (tokens 148-151: o = 0, lse = -inf); the last CTA of sequence 1
  // (tokens 192-194) has a second warpgroup of padding rows only, which skips every tile; and with this case's
  // draws sequence 1's tokens 144-151 straddle a chunk boundary on the warpgroup path, where the first warpgroup
  // skips a tile.
  { Case c = base; c.name = "wgmma padded warpgroups"; c.warps = 8; c.chunk_masks = true; c.keep = 0.6; c.n_q = {150, 195}; c.n_k = {406, 300}; c.lengths = true; add(c); }
  // The wgmma tiling on a ring of 3 stages (the launcher's choice where 4 do not fit), and unions of one tile.
  { Case c = base; c.name = "wgmma 3 stages chunk masks raw"; c.warps = 8; c.stages = 3; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {400}; c.n_k = {400}; add(c); }
  // Runs of union tiles that one warpgroup does not attend (the ring's depth and longer): Stage 2 used to hang.
  { Case c = base; c.name = "wgmma warpgroup gaps of 3 raw"; c.warps = 8; c.gap_run = 3; c.prior = PriorMode::kRaw; c.n_q = {200}; c.n_k = {1500}; add(c); }
  { Case c = base; c.name = "wgmma warpgroup gaps of 4 est"; c.warps = 8; c.gap_run = 4; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {130, 64}; c.n_k = {2000, 700}; c.varlen = true; add(c); }
  { Case c = base; c.name = "wgmma 3 stages warpgroup gaps of 2"; c.warps = 8; c.stages = 3; c.gap_run = 2; c.prior = PriorMode::kRaw; c.n_q = {200}; c.n_k = {1500}; add(c); }
  { Case c = base; c.name = "persistent 2 CTAs warpgroup gaps of 3"; c.warps = 8; c.persistent = 2; c.gap_run = 3; c.prior = PriorMode::kRaw; c.n_q = {300}; c.n_k = {1400}; add(c); }
  // The warpgroup tiling over many sequences: grids of more CTAs than a GPU has SMs (several waves, CTAs of short
  // sequences with no rows), a varlen batch of 12 sequences of 150-370 tokens and a padded batch of 8.
  {
    Case c = base;
    c.name = "wgmma varlen 12 sequences";
    c.warps = 8; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.varlen = true; c.keep = 0.5;
    c.n_q.clear(); c.n_k.clear();
    for (int i = 0; i < 12; ++i) { c.n_q.push_back(150 + 20 * i); c.n_k.push_back(150 + 20 * i + (i % 3) * 40); }
    add(c);
  }
  {
    Case c = base;
    c.name = "wgmma padded 8 sequences";
    c.warps = 8; c.prior = PriorMode::kEstimateDiagonal; c.lengths = true;
    c.n_q.clear(); c.n_k.clear();
    for (int i = 0; i < 8; ++i) { c.n_q.push_back(400 - 29 * i); c.n_k.push_back(400 - 13 * i); }
    add(c);
  }
  { Case c = base; c.name = "wgmma one tile per union"; c.warps = 8; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {64, 50}; c.n_k = {64, 50}; c.varlen = true; add(c); }
  // A union of more than 32 words (64K keys): the one-item kernel merges its staged token words on every thread
  // (no union list) and must agree bitwise with the persistent kernel, which ORs them with atomics.
  { Case c = base; c.name = "wgmma union of 69 words n_k 140000"; c.prior = PriorMode::kRaw; c.n_q = {8}; c.n_k = {140000}; c.splits = 1; c.persistent = 2; add(c); }
  // The persistent kernel with a few CTAs, so that each walks many items (both union buffers, the ring's phases
  // running on across items, items on the warpgroup and the per-warp paths, with and without a table, tables in
  // rounds, padding-only items): outputs bitwise equal to the one-item-per-CTA kernel's.
  { Case c = base; c.name = "persistent 3 CTAs chunk masks raw"; c.warps = 8; c.persistent = 3; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {700}; c.n_k = {700}; add(c); }
  { Case c = base; c.name = "persistent 2 CTAs g16 no prior"; c.warps = 8; c.persistent = 2; c.n_q = {500}; c.n_k = {530}; add(c); }
  { Case c = base; c.name = "persistent 3 CTAs fixed order"; c.warps = 8; c.persistent = 3; c.fixed_order = true; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {700}; c.n_k = {700}; add(c); }
  { Case c = base; c.name = "persistent 5 CTAs dense"; c.warps = 8; c.persistent = 5; c.dense = true; c.n_q = {333}; c.n_k = {333}; add(c); }
  { Case c = base; c.name = "persistent 1 CTA f16 C16 est"; c.warps = 8; c.persistent = 1; c.dtype = c.o_dtype = DType::kF16; c.chunk_masks = true; c.chunk = 16; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {300}; c.n_k = {330}; add(c); }
  { Case c = base; c.name = "persistent 2 CTAs per tile"; c.warps = 8; c.persistent = 2; c.bias_table = false; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {300}; c.n_k = {300}; add(c); }
  { Case c = base; c.name = "persistent 3 CTAs padded lengths"; c.warps = 8; c.persistent = 3; c.chunk_masks = true; c.keep = 0.6; c.prior = PriorMode::kRaw; c.n_q = {150, 195}; c.n_k = {406, 300}; c.lengths = true; add(c); }
  { Case c = base; c.name = "persistent 2 CTAs varlen g4"; c.warps = 8; c.persistent = 2; c.h_q = 8; c.h_kv = 2; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {50, 190, 3}; c.n_k = {50, 190, 700}; c.varlen = true; add(c); }
  { Case c = base; c.name = "persistent 2 CTAs table rounds"; c.warps = 8; c.persistent = 2; c.chunk_masks = true; c.chunk = 16; c.prior = PriorMode::kRaw; c.keep = 0.9; c.n_q = {200}; c.n_k = {9000}; add(c); }
  { Case c = base; c.name = "persistent 4 CTAs g6 per token"; c.warps = 8; c.persistent = 4; c.h_q = 12; c.h_kv = 2; c.prior = PriorMode::kRaw; c.n_q = {333}; c.n_k = {333}; add(c); }
  // Items whose tiles are all whole (n_k a multiple of 64) take the producer's tensor-copy-only loop; the varlen case
  // mixes them with items that end in a partial tile (the general walk), so the ring's phases run on across both.
  { Case c = base; c.name = "persistent 3 CTAs whole tiles chunk masks"; c.warps = 8; c.persistent = 3; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {640}; c.n_k = {640}; add(c); }
  { Case c = base; c.name = "persistent 2 CTAs whole tiles per token"; c.warps = 8; c.persistent = 2; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {448}; c.n_k = {768}; add(c); }
  { Case c = base; c.name = "persistent 2 CTAs whole and partial varlen"; c.warps = 8; c.persistent = 2; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {128, 190, 256}; c.n_k = {128, 190, 640}; c.varlen = true; add(c); }
  // Stage 1's bias lists (bias_lists.cuh): the wide tilings at g = 16 fill their table from them where every token
  // of a CTA has a list (C = 64, 32, 16; chunk and per-token draws; padded and varlen batches), and fall back to the
  // computed table in CTAs with a token past kBiasListCap chunks or without a list (about half of the tokens past
  // the cap at keep 0.69 of 187 chunks), over unions of any number of words (69: three rounds of the rank scan);
  // decode and other groups ignore them. Each is checked against the reference, whose bias is the same log w in
  // float64.
  { Case c = base; c.name = "lists wgmma chunk masks raw"; c.warps = 8; c.lists = true; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {400}; c.n_k = {400}; add(c); }
  { Case c = base; c.name = "lists wgmma per token est C32"; c.warps = 8; c.lists = true; c.chunk = 32; c.sigma = 0.5f; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {300}; c.n_k = {700}; add(c); }
  { Case c = base; c.name = "lists wgmma C16 dropped rows raw"; c.warps = 8; c.lists = true; c.list_drop = 13; c.chunk_masks = true; c.chunk = 16; c.prior = PriorMode::kRaw; c.keep = 0.2; c.n_q = {333}; c.n_k = {333}; add(c); }
  { Case c = base; c.name = "lists wgmma past the cap raw"; c.warps = 8; c.lists = true; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.keep = 0.69; c.n_q = {200}; c.n_k = {12000}; add(c); }
  { Case c = base; c.name = "lists ignored by 7 warps padded est"; c.warps = 7; c.lists = true; c.prior = PriorMode::kEstimateDiagonal; c.sigma = 0.5f; c.n_q = {150, 333}; c.n_k = {300, 333}; c.lengths = true; add(c); }
  { Case c = base; c.name = "lists wgmma varlen raw"; c.warps = 8; c.lists = true; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.varlen = true; c.n_q = {50, 190, 3}; c.n_k = {50, 190, 700}; add(c); }
  { Case c = base; c.name = "lists wgmma 3 stages raw"; c.warps = 8; c.stages = 3; c.lists = true; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {400}; c.n_k = {400}; add(c); }
  { Case c = base; c.name = "lists g4 and decode ignore them"; c.lists = true; c.h_q = 8; c.h_kv = 2; c.prior = PriorMode::kRaw; c.n_q = {200}; c.n_k = {200}; add(c); }
  { Case c = base; c.name = "lists union of 69 words raw"; c.warps = 8; c.lists = true; c.prior = PriorMode::kRaw; c.keep = 0.02; c.n_q = {8}; c.n_k = {140000}; c.splits = 1; add(c); }
  { Case c = base; c.name = "lists decode split ignores them"; c.lists = true; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {1, 1}; c.n_k = {1500, 700}; c.splits = 3; add(c); }
  // Paged K/V (shuffled pages, NaN spare pages): each tiling's tile addressing through the block table, including
  // the persistent kernel, whose whole-tile items then take its general producer walk.
  { Case c = base; c.name = "paged P128 wgmma chunk masks raw"; c.warps = 8; c.page_size = 128; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {400}; c.n_k = {400}; add(c); }
  { Case c = base; c.name = "paged P64 decode split"; c.page_size = 64; c.n_q = {1, 1, 1}; c.n_k = {5000, 4000, 64}; add(c); }
  { Case c = base; c.name = "paged P256 varlen g4 est"; c.warps = 8; c.page_size = 256; c.h_q = 8; c.h_kv = 2; c.prior = PriorMode::kEstimateDiagonal; c.n_q = {50, 190, 3}; c.n_k = {50, 590, 700}; c.varlen = true; add(c); }
  { Case c = base; c.name = "paged P192 d64 f16 g8"; c.d = 64; c.dtype = c.o_dtype = DType::kF16; c.h_q = 8; c.page_size = 192; c.n_q = {500}; c.n_k = {500}; add(c); }
  { Case c = base; c.name = "paged P128 d256 padded"; c.d = 256; c.page_size = 128; c.n_q = {100, 37}; c.n_k = {300, 200}; c.lengths = true; add(c); }
  { Case c = base; c.name = "persistent 3 CTAs paged P128 whole tiles"; c.warps = 8; c.persistent = 3; c.page_size = 128; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {640}; c.n_k = {640}; add(c); }
  { Case c = base; c.name = "persistent 2 CTAs paged P64 varlen"; c.warps = 8; c.persistent = 2; c.page_size = 64; c.chunk_masks = true; c.prior = PriorMode::kRaw; c.n_q = {128, 190, 256}; c.n_k = {128, 190, 640}; c.varlen = true; add(c); }
  return cs;
}

}  // namespace

int run_conformance(bool verbose) {
  int failures = 0;
  uint64_t seed = 12345;
  // ATTEND_CASES="a|b" runs only the cases whose names contain a or b (sanitizer runs); seeds stay those of the
  // full list.
  std::vector<std::string> only;
  if (const char* env = std::getenv("ATTEND_CASES")) {
    std::string rest = env;
    for (size_t bar; (bar = rest.find('|')) != std::string::npos; rest = rest.substr(bar + 1))
      only.push_back(rest.substr(0, bar));
    only.push_back(rest);
  }
  for (const Case& c : conformance_cases()) {
    const uint64_t case_seed = seed++;
    if (!only.empty() && std::none_of(only.begin(), only.end(),
                                      [&](const std::string& o) { return c.name.find(o) != std::string::npos; }))
      continue;
    const Outcome r = run_case(c, case_seed);
    const bool f16 = c.dtype == DType::kF16 && c.o_dtype != DType::kBF16;
    const double tol = f16 ? 4e-3 : 1.5e-2;
    // The persistent kernel runs each item as the one-item-per-CTA kernel does: the same bits.
    bool same_bits = true;
    if (c.persistent > 0) {
      Case off = c;
      off.persistent = -1;
      same_bits = run_case(off, case_seed).digest == r.digest;
    }
    // Paged K/V reads the same keys: the same bits as the contiguous run.
    if (c.page_size > 0) {
      Case flat = c;
      flat.page_size = 0;
      same_bits = same_bits && run_case(flat, case_seed).digest == r.digest;
    }
    const bool ok = r.finite && r.padding_ok && r.rel_l2 <= tol && r.lse_err <= 2e-2 && same_bits;
    if (!ok) ++failures;
    if (!ok || verbose || std::getenv("ATTEND_VERBOSE")) {
      std::printf("%-4s %-32s rel_l2 %.2e max_abs %.2e lse_err %.2e finite %d padding %d same bits %d\n",
                  ok ? "ok" : "FAIL", c.name.c_str(), r.rel_l2, r.max_abs, r.lse_err, int(r.finite),
                  int(r.padding_ok), int(same_bits));
      std::fflush(stdout);  // a case that hangs shows as the one after the last line
    }
  }
  std::printf("conformance: %d failure(s)\n", failures);
  return failures;
}

}  // namespace attend_check
