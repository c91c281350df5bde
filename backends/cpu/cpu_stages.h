// The CPU backend's stage implementations. Each takes the public params (normalizing them again is cheap and
// makes direct calls as safe as calls through the validated API) and runs on the TBB pool.
#pragma once

#include "dashattn/params.h"

namespace dashattn {
namespace cpu {

void summarize(const SummarizeParams& p);   // Stage 0
void route(const RouteParams& p);           // Stage 1
void attend(const AttendParams& p);         // Stage 2
void dense_attention(const DenseParams& p); // causal baseline, same kernels as Stage 2

}  // namespace cpu
}  // namespace dashattn
