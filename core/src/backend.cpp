// The default composed forward: Stage 0, then Stage 1, then Stage 2, over a caller-owned (or, for the convenience
// API, temporarily allocated) workspace.
#include <memory>

#include "dashattn/backend.h"
#include "dashattn/error.h"
#include "dashattn/validate.h"
#include "dashattn/workspace.h"

namespace dashattn {

namespace {

constexpr size_t kScratchAlign = 256;
size_t align_up(size_t bytes) { return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

}  // namespace

void* Backend::acquire_scratch(size_t bytes, void* stream) {
  (void)stream;
  return allocate(bytes);
}

void Backend::release_scratch(void* ptr, void* stream) noexcept {
  if (ptr == nullptr) return;
  try {
    synchronize(stream);
  } catch (...) {
  }
  deallocate(ptr);
}

void Backend::copy_regions(const CopyRegion* regions, size_t count, void* stream) {
  for (size_t i = 0; i < count; ++i) {
    copy(regions[i].dst, regions[i].src, regions[i].bytes, CopyKind::kDeviceToDevice, stream);
  }
}

size_t Backend::attend_scratch_bytes(const ProblemShape&) const { return 0; }

void Backend::route_with_scratch(const RouteParams& p, const ProblemShape&, void*, size_t) { route(p); }

void Backend::attend_with_scratch(const AttendParams& p, const ProblemShape&, void*, size_t) { attend(p); }

void Backend::summarize_and_route(const SummarizeParams& sp, const RouteParams& rp) {
  summarize(sp);
  route(rp);
}

void Backend::summarize_beside(const SummarizeParams& sp, const std::function<void()>& stage1,
                               const std::function<void()>& stage2) {
  summarize(sp);
  stage1();
  stage2();
}

size_t Backend::workspace_size(const ForwardParams& p) const {
  const ProblemShape s = forward_shape(p);
  const size_t scratch = attend_scratch_bytes(s);
  return align_up(plan_workspace(p, s, nullptr).bytes) + scratch;
}

void Backend::forward(const ForwardParams& p) {
  const ProblemShape s = forward_shape(p);
  const size_t core_bytes = align_up(plan_workspace(p, s, nullptr).bytes);
  const size_t scratch_bytes = attend_scratch_bytes(s);
  const size_t need = core_bytes + scratch_bytes;
  void* ws = p.workspace;
  bool owned = false;
  if (need > 0 && ws == nullptr) {
    ws = acquire_scratch(need, p.stream);
    owned = true;
  } else if (need > p.workspace_bytes) {
    throw InvalidArgument("workspace_bytes", ">= " + std::to_string(need) + " (workspace_size())",
                          std::to_string(p.workspace_bytes));
  }
  // Given back however the call ends (a launch error included), in the stream's order.
  struct Release {
    Backend* be;
    void* ptr;
    void* stream;
    ~Release() { be->release_scratch(ptr, stream); }
  } release{this, owned ? ws : nullptr, p.stream};

  const ForwardParams f = plan_workspace(p, s, ws).params;
  void* const scratch = scratch_bytes > 0 ? static_cast<char*>(ws) + core_bytes : nullptr;

  SummarizeParams sp;
  sp.k = f.k;
  sp.summary_query = f.summary_query;
  sp.summaries = f.summaries;
  sp.first_chunk = f.summaries_valid;
  sp.first_chunks = f.summaries_valid_per_seq;
  sp.batch = f.batch;
  sp.method = f.method;
  sp.stream = f.stream;

  auto stage1 = [&]() {
    RouteParams rp;
    rp.q = f.q;
    rp.summaries = f.summaries;
    rp.n_k = s.n_k;
    rp.batch = f.batch;
    rp.method = f.method;
    rp.routing = f.routing;
    rp.stream = f.stream;
    route_with_scratch(rp, s, scratch, scratch_bytes);
  };
  auto stage2 = [&]() {
    AttendParams ap;
    ap.q = f.q;
    ap.k = f.k;
    ap.v = f.v;
    ap.summaries = f.summaries;
    ap.routing = f.routing;
    ap.o = f.o;
    ap.lse = f.lse;
    ap.batch = f.batch;
    ap.method = f.method;
    ap.stream = f.stream;
    attend_with_scratch(ap, s, scratch, scratch_bytes);
  };
  // When every chunk this call completes lies at or after the last query's chunk (a decode step of one token per
  // sequence), nothing later reads Stage 0's output and the backend may overlap it with them.
  if (f.summaries_valid >= last_query_chunk(s)) {
    summarize_beside(sp, stage1, stage2);
  } else {
    summarize(sp);
    stage1();
    stage2();
  }
}

}  // namespace dashattn
