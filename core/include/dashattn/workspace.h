// Workspace planning for the composed forward: which intermediate buffers live in caller-owned scratch.
//
// The same function computes the size (dry run, base = nullptr) and the views (real base), so the two cannot
// disagree (the FlashInfer plan/run habit).
#pragma once

#include <cstddef>

#include "dashattn/params.h"
#include "dashattn/validate.h"

namespace dashattn {

struct WorkspacePlan {
  size_t bytes = 0;
  ForwardParams params;  // copy of the input with every needed intermediate view filled in
};

// base may be nullptr to only measure. Views get 256-byte aligned offsets.
WorkspacePlan plan_workspace(const ForwardParams& normalized, const ProblemShape& shape, void* base);

}  // namespace dashattn
