#include "batch_files.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cli_runner.h"
#include "dashattn/synthetic.h"

namespace dashattn_test {
namespace {

namespace io = dashattn::io;
namespace synthetic = dashattn::synthetic;
using dashattn::DType;

constexpr int64_t kHq = 4, kHkv = 2, kD = 64;

synthetic::Problem problem(int64_t batch, int64_t n, uint64_t seed) {
  synthetic::Config c;
  c.batch = batch;
  c.n = n;
  c.h_q = kHq;
  c.h_kv = kHkv;
  c.d = kD;
  c.num_needles = 2;
  c.needle_queries = 16;
  c.seed = seed;
  return synthetic::generate(c);
}

io::Tensor f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  return io::Tensor(name, DType::kF32, std::move(shape), synthetic::convert(v, DType::kF32));
}

io::Tensor i32(const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(int32_t));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return io::Tensor(name, DType::kI32, std::move(shape), std::move(bytes));
}

std::vector<int32_t> ints(const io::Tensor& t) {
  const int32_t* p = reinterpret_cast<const int32_t*>(t.data());
  return std::vector<int32_t>(p, p + t.numel());
}

// rows [begin, begin + count) of sequence s of a [b, n, h, d] float buffer.
void append_rows(std::vector<float>& out, const std::vector<float>& x, int64_t n, int64_t h, int64_t s, int64_t begin,
                 int64_t count) {
  const auto first = x.begin() + static_cast<std::ptrdiff_t>((s * n + begin) * h * kD);
  out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(count * h * kD));
}

}  // namespace

io::TensorFile padded_batch() {
  const int64_t b = 3, n = 320, n_q = 64;
  const synthetic::Problem p = problem(b, n, 11);
  std::vector<float> q;
  for (int64_t s = 0; s < b; ++s) append_rows(q, p.q, n, kHq, s, n - n_q, n_q);
  io::TensorFile f;
  f.add(f32("q", {b, n_q, kHq, kD}, q));
  f.add(f32("k", {b, n, kHkv, kD}, p.k));
  f.add(f32("v", {b, n, kHkv, kD}, p.v));
  f.add(f32("summary_query", {kHkv, kD}, p.summary_query));
  f.add(i32("seqlens_k", {b}, {320, 130, 257}));
  return f;
}

io::TensorFile packed_batch() {
  const int64_t n = 300;
  const std::vector<int32_t> n_q = {40, 1, 70}, n_k = {300, 129, 70};
  const synthetic::Problem p = problem(3, n, 12);
  std::vector<float> q, k, v;
  std::vector<int32_t> cu_q = {0}, cu_k = {0};
  for (int64_t s = 0; s < 3; ++s) {
    append_rows(q, p.q, n, kHq, s, n_k[s] - n_q[s], n_q[s]);
    append_rows(k, p.k, n, kHkv, s, 0, n_k[s]);
    append_rows(v, p.v, n, kHkv, s, 0, n_k[s]);
    cu_q.push_back(cu_q.back() + n_q[s]);
    cu_k.push_back(cu_k.back() + n_k[s]);
  }
  io::TensorFile f;
  f.add(f32("q", {cu_q.back(), kHq, kD}, q));
  f.add(f32("k", {cu_k.back(), kHkv, kD}, k));
  f.add(f32("v", {cu_k.back(), kHkv, kD}, v));
  f.add(f32("summary_query", {kHkv, kD}, p.summary_query));
  f.add(i32("cu_seqlens_q", {4}, cu_q));
  f.add(i32("cu_seqlens_k", {4}, cu_k));
  return f;
}

io::TensorFile paged_copy(const io::TensorFile& contiguous, int64_t page_size, uint64_t seed) {
  // Where each sequence's keys start in the contiguous k (viewed as rows of h_kv * d floats) and how many it has.
  std::vector<int64_t> begin, length;
  if (contiguous.contains("cu_seqlens_k")) {
    const std::vector<int32_t> cu = ints(contiguous.at("cu_seqlens_k"));
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      begin.push_back(cu[s]);
      length.push_back(cu[s + 1] - cu[s]);
    }
  } else {
    const int64_t n = contiguous.at("k").shape()[1];
    const std::vector<int32_t> lengths = ints(contiguous.at("seqlens_k"));
    for (size_t s = 0; s < lengths.size(); ++s) {
      begin.push_back(static_cast<int64_t>(s) * n);
      length.push_back(lengths[s]);
    }
  }
  const int64_t seqs = static_cast<int64_t>(length.size());
  const int64_t longest = *std::max_element(length.begin(), length.end());
  const int64_t width = (longest + page_size - 1) / page_size + 1;  // one column more than needed
  int64_t used = 0;
  for (int64_t l : length) used += (l + page_size - 1) / page_size;
  const int64_t pages = used + 2;

  std::vector<int32_t> order(static_cast<size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));

  const int64_t row = kHkv * kD;
  std::vector<int32_t> table(static_cast<size_t>(seqs * width), -1);
  std::vector<float> k_pool(static_cast<size_t>(pages * page_size * row), NAN);
  std::vector<float> v_pool(k_pool.size(), NAN);
  const float* k = reinterpret_cast<const float*>(contiguous.at("k").data());
  const float* v = reinterpret_cast<const float*>(contiguous.at("v").data());
  size_t next = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t j = 0; j < length[s]; j += page_size) {
      const int32_t page = order[next++];
      table[static_cast<size_t>(s * width + j / page_size)] = page;
      const int64_t keys = std::min(page_size, length[s] - j);
      const size_t from = static_cast<size_t>((begin[s] + j) * row), to = static_cast<size_t>(page * page_size * row);
      std::copy(k + from, k + from + keys * row, k_pool.begin() + static_cast<std::ptrdiff_t>(to));
      std::copy(v + from, v + from + keys * row, v_pool.begin() + static_cast<std::ptrdiff_t>(to));
    }
  }
  io::TensorFile paged;
  for (const io::Tensor& t : contiguous) {
    if (t.name() == "k") {
      paged.add(f32("k", {pages, page_size, kHkv, kD}, k_pool));
    } else if (t.name() == "v") {
      paged.add(f32("v", {pages, page_size, kHkv, kD}, v_pool));
    } else {
      paged.add(t);
    }
  }
  paged.add(i32("block_table", {seqs, width}, table));
  return paged;
}

io::TensorFile without(const io::TensorFile& f, const std::string& name) {
  io::TensorFile out;
  for (const io::Tensor& t : f) {
    if (t.name() != name) out.add(t);
  }
  return out;
}

std::string write_scratch(const io::TensorFile& f, const std::string& name) {
  const std::string path = scratch_path(name);
  io::write_tensor_file(path, f);
  return path;
}

}  // namespace dashattn_test
