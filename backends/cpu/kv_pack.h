// K and V converted to f32 once per call, in the chunk-blocked layouts the attention kernels read:
//   K^T block per (kv head, chunk): [d][Cp] (keys along the vector axis, for the broadcast-FMA score kernel),
//   V block per (kv head, chunk):   [C][dp] (head dim along the vector axis, for the P·V kernel),
// with Cp, dp padded to kFloatPad and the padding zeroed.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_common.h"
#include "backends/cpu/simd_kernels.h"

namespace dashattn {
namespace cpu {

class PackedKv {
 public:
  // k, v: normalized rank-4 views (page pools when seqs.batch has a block table); every sequence's chunk grid
  // starts at its own first key.
  void pack(const TensorView& k, const TensorView& v, const Sequences& seqs, int64_t chunk);

  int64_t chunk() const { return chunk_; }
  int64_t chunk_pad() const { return chunk_pad_; }
  int64_t d() const { return d_; }
  int64_t d_pad() const { return d_pad_; }

  const float* kt_block(int64_t s, int64_t r, int64_t c) const {
    return kt_.data() + block_index(s, r, c) * d_ * chunk_pad_;
  }
  const float* v_block(int64_t s, int64_t r, int64_t c) const {
    return v_.data() + block_index(s, r, c) * chunk_ * d_pad_;
  }

 private:
  int64_t block_index(int64_t s, int64_t r, int64_t c) const { return r * total_chunks_ + chunk_base_[s] + c; }

  int64_t chunk_ = 0, chunk_pad_ = 0, d_ = 0, d_pad_ = 0, h_kv_ = 0, total_chunks_ = 0;
  std::vector<int64_t> chunk_base_;  // first packed chunk of each sequence
  HugeScratch<float> kt_, v_;
};

}  // namespace cpu
}  // namespace dashattn
