// Small pieces the CPU stages share: scratch buffers, element addressing, sequence spans, the routing score
// formula and the parallel loop.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <sys/mman.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "dashattn/params.h"
#include "dashattn/validate.h"
#include "hwy/aligned_allocator.h"

namespace dashattn {
namespace cpu {

// Grow-only, 64-byte aligned scratch. Contents are unspecified after reserve() grows it.
template <typename T>
class Scratch {
 public:
  T* reserve(size_t n) {
    if (n > capacity_) {
      data_ = hwy::AllocateAligned<T>(n);
      capacity_ = n;
    }
    return data_.get();
  }
  T* data() const { return data_.get(); }

 private:
  hwy::AlignedFreeUniquePtr<T[]> data_;
  size_t capacity_ = 0;
};

// Grow-only scratch for large blocks read at scattered places (the packed K/V), backed by transparent huge pages
// where the kernel grants them (madvise mode). Sparse attention touches each 32 KiB K or V block of a chunk once
// per tile, i.e. 8 fresh 4 KiB pages per block; on a virtual machine every such TLB miss is a two-level page walk.
// Contents are unspecified after reserve() grows it.
template <typename T>
class HugeScratch {
 public:
  T* reserve(size_t n) {
    if (n > capacity_) {
      constexpr size_t kHuge = size_t{2} << 20;
      const size_t bytes = (n * sizeof(T) + kHuge - 1) / kHuge * kHuge;
      data_.reset(static_cast<T*>(std::aligned_alloc(kHuge, bytes)));
      if (!data_) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
      madvise(data_.get(), bytes, MADV_HUGEPAGE);  // a hint: failure only costs speed
#endif
      capacity_ = n;
    }
    return data_.get();
  }
  T* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> data_;
  size_t capacity_ = 0;
};

inline const void* element(const TensorView& t, int64_t i0, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return static_cast<const char*>(t.data) + t.offset(i0, i1, i2, i3) * dtype_size(t.dtype);
}
inline void* mutable_element(const TensorView& t, int64_t i0, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return static_cast<char*>(t.data) + t.offset(i0, i1, i2, i3) * dtype_size(t.dtype);
}

// The sequences of a (normalized) batch: padded [b, n, ...] with optional per-sequence lengths, or packed varlen.
struct Sequences {
  BatchLayout batch;
  int64_t count = 0;
  int64_t padded_n_q = 0, padded_n_k = 0;  // the padded axes (varlen: max_seqlen_q/k)
  int64_t rows_q = 0;                      // rows of the per-row outputs' last axis

  SequenceSpan span(int64_t s) const { return sequence_span(batch, s, padded_n_q, padded_n_k); }
};

// Sequences of a problem whose q ([b, n_q, ...] or [1, total_q, ...]) and k are normalized rank-4 views. A paged
// k is a page pool [pages, P, ...] whose axis 1 is the page size, so the padded key length is max_seqlen_k.
inline Sequences make_sequences(const BatchLayout& batch, const TensorView& q, const TensorView& k) {
  Sequences s;
  s.batch = batch;
  s.rows_q = q.shape[1];
  if (batch.is_varlen()) {
    s.count = batch.num_seqs;
    s.padded_n_q = batch.max_seqlen_q;
    s.padded_n_k = batch.max_seqlen_k;
  } else {
    s.count = q.shape[0];
    s.padded_n_q = q.shape[1];
    s.padded_n_k = batch.is_paged() ? batch.max_seqlen_k : k.shape[1];
  }
  return s;
}

// The routing logit scale 1/sqrt(d), independent of the softmax scale.
inline float routing_inv_sqrt_d(int64_t d) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))); }

// x = (α−1)·z with z = γ·⟨q, k̄⟩·(1/sqrt(d)), in float, in this order. Stage 1 and Stage 2 both call it on the
// same matmul_bt dot, so the x (and hence the weights) they see are the same bits.
struct RoutingScore {
  float gamma, inv_sqrt_d, alpha_minus_one;
  float operator()(float dot) const { return alpha_minus_one * ((gamma * dot) * inv_sqrt_d); }
};
inline RoutingScore make_routing_score(const MethodParams& m, int64_t d) {
  return RoutingScore{m.gamma, routing_inv_sqrt_d(d), m.alpha - 1.0f};
}

// Runs fn(i) for i in [0, n) on the TBB pool, one task per index (items are coarse: a chunk or a query tile).
template <typename Fn>
void parallel_items(int64_t n, const Fn& fn) {
  if (n <= 0) return;
  if (n == 1) {
    fn(int64_t{0});
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, n, 1),
      [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t i = r.begin(); i != r.end(); ++i) fn(i);
      },
      tbb::simple_partitioner());
}

}  // namespace cpu
}  // namespace dashattn
