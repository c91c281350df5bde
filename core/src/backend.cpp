// The default composed forward: Stage 0, then Stage 1, then Stage 2, over a caller-owned (or, for the convenience
// API, temporarily allocated) workspace.
#include <memory>

#include "dashattn/backend.h"
#include "dashattn/error.h"
#include "dashattn/validate.h"
#include "dashattn/workspace.h"

namespace dashattn {

size_t Backend::workspace_size(const ForwardParams& p) const {
  return plan_workspace(p, forward_shape(p), nullptr).bytes;
}

void Backend::forward(const ForwardParams& p) {
  const ProblemShape s = forward_shape(p);
  const size_t need = plan_workspace(p, s, nullptr).bytes;
  void* ws = p.workspace;
  bool owned = false;
  if (need > 0 && ws == nullptr) {
    ws = allocate(need);
    owned = true;
  } else if (need > p.workspace_bytes) {
    throw InvalidArgument("workspace_bytes", ">= " + std::to_string(need) + " (workspace_size())",
                          std::to_string(p.workspace_bytes));
  }
  struct Release {
    Backend* be;
    void* ptr;
    void* stream;
    ~Release() {
      if (ptr) {
        try {
          be->synchronize(stream);
        } catch (...) {
        }
        be->deallocate(ptr);
      }
    }
  } release{this, owned ? ws : nullptr, p.stream};

  const ForwardParams f = plan_workspace(p, s, ws).params;

  SummarizeParams sp;
  sp.k = f.k;
  sp.summary_query = f.summary_query;
  sp.summaries = f.summaries;
  sp.first_chunk = f.summaries_valid;
  sp.batch = f.batch;
  sp.method = f.method;
  sp.stream = f.stream;
  summarize(sp);

  RouteParams rp;
  rp.q = f.q;
  rp.summaries = f.summaries;
  rp.n_k = s.n_k;
  rp.batch = f.batch;
  rp.method = f.method;
  rp.routing = f.routing;
  rp.stream = f.stream;
  route(rp);

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
  attend(ap);
}

}  // namespace dashattn
