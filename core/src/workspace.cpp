#include "dashattn/workspace.h"

#include <algorithm>

namespace dashattn {
namespace {

constexpr size_t kAlign = 256;

// Carves one contiguous tensor out of the workspace (or just counts its bytes when base is null).
TensorView carve(void* base, size_t* offset, DType dtype, const Device& dev, std::initializer_list<int64_t> shape) {
  TensorView v = make_view(nullptr, dtype, shape, dev);
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(v.numel(), 1)) * dtype_size(dtype);
  *offset = (*offset + kAlign - 1) / kAlign * kAlign;
  // In a dry run the pointer is a non-null placeholder so the views still validate; it is never dereferenced.
  v.data = base ? static_cast<char*>(base) + *offset : reinterpret_cast<void*>(kAlign + *offset);
  *offset += bytes;
  return v;
}

}  // namespace

WorkspacePlan plan_workspace(const ForwardParams& p, const ProblemShape& s, void* base) {
  WorkspacePlan plan;
  plan.params = p;
  ForwardParams& f = plan.params;
  const Device dev = p.q.device;
  const int64_t b = p.batch.is_varlen() ? 1 : s.batch;
  size_t off = 0;
  if (!f.summaries.defined()) {
    f.summaries = carve(base, &off, p.k.dtype, dev, {s.batch, std::max<int64_t>(s.max_chunks, 1), s.h_kv, s.d});
  }
  if (!f.routing.mask.defined()) f.routing.mask = carve(base, &off, DType::kU32, dev, {b, s.h_kv, s.rows_q, s.mask_words});
  if (!f.routing.tau.defined()) f.routing.tau = carve(base, &off, DType::kF32, dev, {b, s.h_q, s.rows_q});
  if (!f.routing.mu.defined()) f.routing.mu = carve(base, &off, DType::kF32, dev, {b, s.h_kv, s.rows_q});
  plan.bytes = off == 0 ? 0 : (off + kAlign - 1) / kAlign * kAlign;
  return plan;
}

}  // namespace dashattn
