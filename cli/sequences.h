// One sequence of a batch as a contiguous problem of its own, and its slice of a forward's outputs.
//
// A padded batch with lengths, a packed varlen batch or a paged batch is, by the contract, the same function on
// each sequence. `verify` compares each sequence with the float64 reference on its own contiguous keys (gathered
// from the pages or the packed rows), and `run` plots the first sequence.
#pragma once

#include "dashattn/validate.h"
#include "problem.h"

namespace dashattn::cli {

// Where sequence s's query rows and keys are (the library's own reading of the layout).
SequenceSpan span_of(const HostProblem& p, int64_t s);

// Sequence s as a batch of one: q [1, n_q, h_q, d] and k, v [1, n_k, h_kv, d] with its n_q queries and n_k keys.
HostProblem sequence_problem(const HostProblem& p, int64_t s);

// Sequence s's rows of o, lse, mask, active_chunks, tau and mu (masks keep the batch's word count) and its
// complete chunks' summaries (of chunk keys each), shaped as run_forward shapes a batch of one.
ForwardOutputs sequence_outputs(const HostProblem& p, const ForwardOutputs& out, int64_t s, int64_t chunk);

}  // namespace dashattn::cli
