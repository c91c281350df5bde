// A compact float64 implementation of docs/semantics.md for `dashattn verify`.
//
// Independent of every backend and of the library's entmax solver: the threshold comes from sorting (closed
// forms for alpha = 1.5 and 2, bisection in double otherwise). Stage 2 is templated on the accumulation type so
// the same code also gives the "same-precision naive computation" (float) that sets verify's tolerances.
#pragma once

#include <cstdint>
#include <vector>

#include "dashattn/params.h"

namespace dashattn::cli::reference {

struct Problem {
  int64_t batch = 0, n_q = 0, n_k = 0, h_q = 0, h_kv = 0, d = 0;
  DType dtype = DType::kF32;  // of q, k, v (values below are already exactly representable in it)
  std::vector<double> q;      // [b, n_q, h_q, d]
  std::vector<double> k, v;   // [b, n_k, h_kv, d]
  std::vector<double> summary_query;  // [h_kv, d]; zeros for mean pooling
  MethodParams method;

  int64_t chunk() const { return method.chunk_size; }
  int64_t complete_chunks() const { return n_k / method.chunk_size; }
  double scale() const;  // resolved Stage-2 softmax scale
};

// Stage 0: [b, n_k / C, h_kv, d], rounded to the key dtype as the contract stores them.
std::vector<double> summaries(const Problem& p);

struct Routing {
  int64_t words = 0;
  std::vector<uint32_t> mask;  // [b, h_kv, n_q, words], diagonal bit set
  std::vector<double> log_w;   // [b, h_kv, n_q, n_k / C]: log of the group weight, -inf where not routed
  std::vector<double> mu;      // [b, h_kv, n_q]: mean log w over the routed chunks (0 when none)
  // [b, h_kv, n_q, n_k / C]: whether the chunk is routed could flip under float32 rounding of the scores, because
  // no head has it clearly inside its support and some head has it within rounding of its threshold.
  std::vector<uint8_t> tie;
  // [b, h_kv, n_q]: bound on how far the prior bias of any attended key can move when the scores carry float32
  // rounding (a chunk barely inside the support has a tiny w whose log is ill-conditioned); infinite when some
  // routed chunk's weight could round to zero. Zero for prior none.
  std::vector<double> bias_sensitivity;
};

// Stage 1 over the given summaries (the backend's, to isolate routing from Stage 0 rounding, or our own).
// Real = double is the reference; Real = float computes the scores and weights in float32 as a backend does
// (thresholds still exact on those scores), which is how sensitive the prior bias log w is to rounding.
template <typename Real>
Routing route(const Problem& p, const std::vector<double>& summaries);

// The exact routing's mask with the weights (log w, mu) of another routing wherever both route a chunk: the
// routing a naive same-precision computation would attend with, minus its tie flips.
Routing with_weights_of(const Routing& exact, const Routing& approximate, int64_t complete_chunks);

struct Attention {
  std::vector<double> o;    // [b, n_q, h_q, d]
  std::vector<double> lse;  // [b, h_q, n_q]
};

// Stage 2 with the routing's mask and weights. Real = double is the reference; Real = float is the naive
// same-precision computation, whose o is rounded to the problem's dtype like a backend's.
template <typename Real>
Attention attend(const Problem& p, const Routing& routing);

// The entmax threshold of x (already multiplied by alpha - 1), by sorting. Exposed for tests.
double entmax_threshold_sorted(std::vector<double> x, double alpha);

}  // namespace dashattn::cli::reference
