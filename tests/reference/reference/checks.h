// Running one forward on a backend and checking every output against the float64 reference.
//
// The check is stage by stage: the backend's Stage-0 summaries are compared with the reference's (within one
// unit of the key dtype), then the reference routes and attends from the backend's summaries, so that a summary
// rounded the other way at a bf16 boundary cannot masquerade as a routing error. Masks must match exactly except
// on reported ties, and on chunks whose x is within the rounding a float kernel's dot product can carry (with a
// huge γ that rounding exceeds the contract's 1e-6 tie band); such flips are counted and printed separately.
// Rows (query, KV head) with a flip are left out of the o/lse comparison.
//
// o and lse are judged by the same-precision rule (reference.h, check_tolerance), each element widened by its
// row's bias budget (BiasBudget, bias_allowance): near the entmax threshold the bias log w is ill-conditioned and
// a float kernel summing x in another order than the naive run legitimately lands elsewhere. The budget is ~0
// away from the threshold; the summary line says how many rows it widened and how many needed it.
#pragma once

#include <string>
#include <vector>

#include "reference/backend_io.h"
#include "reference/paged.h"
#include "reference/reference.h"

namespace dashattn::ref {

// Host copies of what a forward wrote. Varlen outputs carry a leading axis of 1 (o keeps q's rank-3 shape).
struct ForwardOutputs {
  DType out_dtype = DType::kF32;
  HostTensor o, lse, mask, tau, mu, active, summaries;  // summaries undefined when not caller-owned
};

// Byte equality of two runs' outputs (paged against contiguous K/V, repeated runs): "" when got and want hold the
// same bytes, else where they first differ; byte_differences gives one such line per output that differs.
std::string byte_difference(const HostTensor& got, const HostTensor& want);
std::vector<std::string> byte_differences(const ForwardOutputs& got, const ForwardOutputs& want);

struct RunOptions {
  DType out_dtype = DType::kF32;  // q's dtype or f32
  bool caller_summaries = true;   // pass a caller-owned summary cache (and read it back)
  bool routing_outputs = true;    // pass caller-owned mask / tau / mu / active_chunks
  bool with_lse = true;
  // > 0: k and v go to the backend as a page pool of this many keys per page (make_pool, shuffled with
  // page_seed; share_first_page: sequences 0 and 1 share their first page, see paged.h) with its block table.
  int64_t page_size = 0;
  uint64_t page_seed = 1;
  bool share_first_page = false;
};

struct RunResult {
  bool unsupported = false;
  std::string reason;  // the Unsupported message when unsupported
  ForwardOutputs out;
};

// Allocates the outputs, uploads, runs dashattn::forward on the backend and downloads. An Unsupported error
// is returned as such; every other exception propagates.
RunResult run_forward(Backend& backend, const Problem& problem, const MethodParams& method, const RunOptions& opt);

struct CheckReport {
  int64_t rows = 0;            // (query, KV head) rows compared
  int64_t tie_rows = 0;        // rows left out of o/lse because of a tie flip
  int64_t tie_flips = 0;       // mask bits that differ on a tie
  int64_t near_tie_flips = 0;  // mask bits that differ within the float rounding of x (γ-amplified), not a tie
  int64_t ties_seen = 0;       // ties the reference reported (flipped or not)
  ToleranceCheck o, lse;
  double max_budget = 0;         // largest row budget Δ (max |d' − d|) over the compared rows
  int64_t widened_rows = 0;      // compared rows whose budget widens some o or lse element beyond the rule's atol
  int64_t budget_needed_rows = 0;  // rows with an o or lse element beyond the strict bound, judged with the budget
  std::vector<std::string> failures;
  std::vector<std::string> tie_lines;

  bool pass() const { return failures.empty(); }
  std::string summary() const;
};

struct CheckOptions {
  bool dense_too = false;  // also compare o with dense causal attention (γ = 0 with prior none)
  int max_failure_lines = 12;
};

// The Stage-0 summaries check_forward routes sequence s from: the backend's where it wrote caller-owned ones,
// the reference's otherwise. With route(), bias_budget() and bias_allowance() this gives a test the very
// allowances the check grants.
std::vector<double> checked_summaries(const Problem& problem, const MethodParams& method, const ForwardOutputs& out,
                                      int64_t s);

CheckReport check_forward(const Problem& problem, const MethodParams& method, const ForwardOutputs& out,
                          const CheckOptions& opt = {});

}  // namespace dashattn::ref
