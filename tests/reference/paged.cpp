#include "reference/paged.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>

namespace dashattn::ref {
namespace {

// Every element of a pool tensor set to a quiet NaN of its dtype.
void fill_nan(HostTensor& t) {
  const int64_t n = t.view.numel();
  for (int64_t i = 0; i < n; ++i) {
    store_from_float(t.bytes.data() + i * dtype_size(t.view.dtype), t.view.dtype, std::nanf(""));
  }
}

// Element offset of key j of sequence span sp, head h, in a problem's K/V view: rank 4 [b, n, h, d], or rank 3
// [total, h, d] for a packed batch.
int64_t key_offset(const TensorView& t, const Span& sp, int64_t j, int64_t h) {
  return t.rank == 3 ? t.offset(sp.k_begin + j, h) : t.offset(sp.batch_index, sp.k_begin + j, h);
}

// Copies key j of sequence span sp (every head) into row (page, row) of a pool.
void copy_row(const TensorView& from, const Span& sp, int64_t j, HostTensor& pool, int64_t page, int64_t row) {
  const int64_t es = dtype_size(from.dtype), h_kv = pool.view.shape[2], d = pool.view.shape[3];
  for (int64_t h = 0; h < h_kv; ++h) {
    std::memcpy(pool.bytes.data() + pool.view.offset(page, row, h, 0) * es,
                static_cast<const char*>(from.data) + key_offset(from, sp, j, h) * es, static_cast<size_t>(d * es));
  }
}

}  // namespace

BatchLayout PagePool::on(BatchLayout l, const int32_t* table_data, const Problem& pr) const {
  l.block_table = table_data;
  l.block_table_stride = stride;
  l.max_seqlen_k = static_cast<int>(pr.padded_n_k());
  return l;
}

void share_prefix(Problem& pr, int64_t page_size) {
  if (pr.num_sequences() < 2) throw std::invalid_argument("share_prefix: a problem of two sequences");
  const Span s0 = pr.span(0), s1 = pr.span(1);
  const int64_t es = dtype_size(pr.k.view.dtype), h_kv = pr.spec.h_kv, d = pr.spec.d;
  for (HostTensor* t : {&pr.k, &pr.v})
    for (int64_t j = 0; j < std::min({page_size, s0.n_k, s1.n_k}); ++j)
      for (int64_t h = 0; h < h_kv; ++h)
        std::memcpy(t->bytes.data() + key_offset(t->view, s1, j, h) * es,
                    t->bytes.data() + key_offset(t->view, s0, j, h) * es, static_cast<size_t>(d * es));
}

PagePool make_pool(const Problem& pr, int64_t page_size, uint64_t seed, bool share, int64_t extra_pages, int64_t slack) {
  const int64_t b = pr.num_sequences(), h_kv = pr.spec.h_kv, d = pr.spec.d;
  PagePool pool;
  pool.page_size = page_size;
  pool.stride = (pr.padded_n_k() + page_size - 1) / page_size + slack;

  // Pages each sequence owns; with share, sequence 1 reuses sequence 0's first page when both have keys.
  std::vector<int64_t> used(static_cast<size_t>(b));
  int64_t owned = 0;
  for (int64_t s = 0; s < b; ++s) {
    used[s] = (pr.span(s).n_k + page_size - 1) / page_size;
    owned += used[s];
  }
  const bool shared = share && b >= 2 && used[0] > 0 && used[1] > 0;
  if (shared) --owned;
  const int64_t pages = owned + std::max<int64_t>(extra_pages, 1);
  std::vector<int32_t> order(static_cast<size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 gen(seed);
  std::shuffle(order.begin(), order.end(), gen);
  const int32_t garbage = order.back();  // owned by nobody; entries past a sequence's length point here

  pool.table.assign(static_cast<size_t>(b * pool.stride), garbage);
  size_t next = 0;
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t j = 0; j < used[s]; ++j) {
      pool.table[s * pool.stride + j] = (s == 1 && j == 0 && shared) ? pool.table[0] : order[next++];
    }
  }

  pool.k = make_host_tensor(pr.k.view.dtype, {pages, page_size, h_kv, d});
  pool.v = make_host_tensor(pr.v.view.dtype, {pages, page_size, h_kv, d});
  fill_nan(pool.k);
  fill_nan(pool.v);
  for (int64_t s = 0; s < b; ++s) {
    const Span sp = pr.span(s);
    for (int64_t j = 0; j < sp.n_k; ++j) {
      const int64_t page = pool.table[s * pool.stride + j / page_size];
      copy_row(pr.k.view, sp, j, pool.k, page, j % page_size);
      copy_row(pr.v.view, sp, j, pool.v, page, j % page_size);
    }
  }
  return pool;
}

}  // namespace dashattn::ref
