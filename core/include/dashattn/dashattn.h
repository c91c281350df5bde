// libdashattn public API: include this one header.
//
//   dashattn::Backend& be = dashattn::Registry::instance().select("auto");
//   dashattn::ForwardParams p;  p.q = ...; p.k = ...; p.v = ...; p.o = ...;
//   dashattn::forward(be, p);
#pragma once

#include "dashattn/backend.h"
#include "dashattn/decoder.h"
#include "dashattn/dtype.h"
#include "dashattn/entmax.h"
#include "dashattn/error.h"
#include "dashattn/geometry.h"
#include "dashattn/params.h"
#include "dashattn/prior.h"
#include "dashattn/stats.h"
#include "dashattn/tensor.h"
#include "dashattn/validate.h"
#include "dashattn/version.h"
#include "dashattn/workspace.h"

namespace dashattn {

// Validated entry points: check arguments (typed errors), check the backend supports them (Unsupported), run.
void forward(Backend& backend, const ForwardParams& p);
size_t workspace_size(Backend& backend, const ForwardParams& p);
void summarize(Backend& backend, const SummarizeParams& p);
void route(Backend& backend, const RouteParams& p);
// Stages 0 and 1 of a step in one call (on the CUDA backend Stage 0 runs beside Stage 1). Valid when no query of rp
// routes a chunk that sp writes: sp.first_chunk at or after the last query's own chunk, as in a decode step of one
// token per sequence; the two share the summary tensor, chunk size and sequences. Throws InvalidArgument otherwise.
void summarize_and_route(Backend& backend, const SummarizeParams& sp, const RouteParams& rp);
void attend(Backend& backend, const AttendParams& p);
void dense_attention(Backend& backend, const DenseParams& p);

}  // namespace dashattn
