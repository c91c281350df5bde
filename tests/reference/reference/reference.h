// The float64 reference of DashAttention, written from docs/semantics.md and nothing else.
//
// Readable scalar code: every loop is the formula of the contract, in double, one sequence at a time. It shares
// no code with any backend: the entmax threshold is found by sorting (α = 1.5, 2) or by bisection (other α),
// the group weights and the prior bias are recomputed here. Only the dtype conversions of dashattn/dtype.h are
// used, to read inputs and to round summaries exactly as the contract says.
//
// Layout of every array here: row-major, query/key axis first, then heads, then the head dim, i.e. q[i][h][e].
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "dashattn/dtype.h"
#include "dashattn/params.h"
#include "dashattn/prior.h"
#include "dashattn/tensor.h"

namespace dashattn::ref {

// ---------------------------------------------------------------------------------------------------------------
// Method parameters, in double.
struct Method {
  int64_t chunk = 64;
  double alpha = 1.5;
  double gamma = 1.0;
  double sigma = 1e8;
  double scale = 0.0;  // 0 selects 1/sqrt(d)
  PriorMode prior = PriorMode::kEstimateDiagonal;

  static Method from(const MethodParams& m);
  double resolved_scale(int64_t d) const;
};

// One sequence of a batch as plain float64 arrays.
struct Sequence {
  int64_t n_q = 0, n_k = 0, h_q = 0, h_kv = 0, d = 0;
  DType key_dtype = DType::kF32;      // summaries are rounded to it
  std::vector<double> q;              // [n_q][h_q][d]
  std::vector<double> k, v;           // [n_k][h_kv][d]
  std::vector<double> summary_query;  // [h_kv][d]; all zeros gives mean pooling

  int64_t group() const { return h_q / h_kv; }
  const double* q_row(int64_t i, int64_t h) const { return &q[(i * h_q + h) * d]; }
  const double* k_row(int64_t j, int64_t r) const { return &k[(j * h_kv + r) * d]; }
  const double* v_row(int64_t j, int64_t r) const { return &v[(j * h_kv + r) * d]; }
};

// Builds a sequence from host float arrays (row-major as above). summary_query may be null (zeros).
Sequence make_sequence(int64_t n_q, int64_t n_k, int64_t h_q, int64_t h_kv, int64_t d, const float* q,
                       const float* k, const float* v, const float* summary_query, DType key_dtype);

// ---------------------------------------------------------------------------------------------------------------
// α-entmax over a plain vector x that is already (α−1)·z. Weights [x − τ]_+^{1/(α−1)} sum to one.

// Exact threshold by sorting: for α = 1.5 and α = 2 the top-k closed form whose support certificate holds; any
// other α falls back to bisection.
double entmax_threshold_sorted(const std::vector<double>& x, double alpha);
// Bisection on [max − 1, max] until the bracket is below tol·max(1, |max|) (or stops shrinking).
double entmax_threshold_bisection(const std::vector<double>& x, double alpha, double tol = 1e-12);
// [x − τ]_+^{1/(α−1)} element-wise.
std::vector<double> entmax_weights(const std::vector<double>& x, double tau, double alpha);
double entmax_weight_sum(const std::vector<double>& x, double tau, double alpha);
// True when x_c lies within the tie band of the contract: |x − τ| ≤ 1e-6·max(1, |τ|).
bool is_entmax_tie(double x, double tau);

// ---------------------------------------------------------------------------------------------------------------
// Stage 0: summaries [num_complete_chunks][h_kv][d], rounded to the key dtype. abs_weighted, when given, receives
// Σ_t p_t·|k_t| per element: the scale of an fp32 accumulation's rounding (a near-zero component of a summary
// can round to a different 16-bit value after fp32 accumulation).
std::vector<double> summarize(const Sequence& s, const Method& m, std::vector<double>* abs_weighted = nullptr);

// A chunk whose (α−1)·z̄ lies within the tie band of its head's threshold.
struct Tie {
  int64_t query = 0, head = 0, chunk = 0;
  double distance = 0;  // |(α−1)·z̄ − τ|
};

// Stage 1 of one sequence.
struct Routing {
  int64_t n_q = 0, h_q = 0, h_kv = 0, num_complete = 0, words = 0;
  std::vector<int64_t> diagonal;  // c_i per query
  std::vector<double> x;          // (α−1)·z̄  [n_q][h_q][num_complete] (0 past c_i)
  std::vector<double> x_abs;      // (α−1)·|γ|·Σ_e |q_e·k̄_e| / sqrt(d): the scale of x's rounding in float
  std::vector<double> tau;        // [n_q][h_q]; NaN when the query has no routable chunk
  std::vector<double> weight;     // group weight w  [n_q][h_kv][num_complete]
  std::vector<double> mu;         // mean log w over the routed chunks [n_q][h_kv]; 0 when none
  std::vector<uint32_t> mask;     // [h_kv][n_q][words], diagonal bit set
  std::vector<int32_t> active;    // routed + 1, [h_kv][n_q]
  std::vector<Tie> ties;

  double w(int64_t i, int64_t r, int64_t c) const { return weight[(i * h_kv + r) * num_complete + c]; }
  bool routed(int64_t i, int64_t r, int64_t c) const { return c < diagonal[i] && w(i, r, c) > 0.0; }
  const uint32_t* mask_row(int64_t r, int64_t i) const { return &mask[(r * n_q + i) * words]; }
  // True when some query head of group r has a tie on chunk c for query i (a mask flip there is allowed).
  bool group_tie(int64_t i, int64_t r, int64_t c) const;
  // True when, for some head of group r, x_c lies within the tie band widened by the rounding a float
  // computation of x (a d-term fp32 dot product) and of τ can carry. A flip there is not a routing error.
  bool group_near_tie(int64_t i, int64_t r, int64_t c, int64_t d) const;
  // Bound on the float rounding of x for query i, head h: the largest x_abs of the row times a d-term
  // dot-product error factor.
  double float_x_error(int64_t i, int64_t h, int64_t d) const;
};

// Routes every query of s against the given summaries ([num_complete][h_kv][d]). mask_words is the row width
// of the caller's mask (the batch's padded width); 0 uses this sequence's own width.
Routing route(const Sequence& s, const std::vector<double>& summaries, const Method& m, int64_t mask_words = 0);

// Orders in which a float kernel may sum the d terms of x: the plain loop, and others a real kernel uses (SIMD or
// warp lanes, a reduction tree, q pre-scaled with fused multiply-adds). Each lands at a different point inside
// the float uncertainty of x, which BiasBudget bounds.
enum class FloatSum : uint8_t { kSequential, kReverse, kLanes8, kPairwise, kFmaPrescaled };

// Stage 1 computed the way a float kernel does: x = (α−1)·γ·⟨q, k̄⟩/sqrt(d) accumulated in float, then the exact
// threshold of those float x. It gives the weights (hence the bias) a float backend can be expected to see.
Routing route_same_precision(const Sequence& s, const std::vector<double>& summaries, const Method& m,
                             int64_t mask_words = 0, FloatSum order = FloatSum::kSequential);

// The routing that the scores x (same layout as rt.x) give, with rt's geometry and x_abs: what a kernel whose x
// came out differently would route.
Routing reroute(const Routing& rt, const std::vector<double>& x, const Method& m);

// Bias d_{i,j} of key j for query i and KV head r under the routing (only meaningful for j in S_i).
double prior_bias_of(const Routing& rt, const Method& m, int64_t i, int64_t r, int64_t c);

// How far a float routing's bias can legitimately sit from the float64 one.
//
// d depends on log w_c, and near the entmax threshold log w is ill-conditioned: a rounding δx of the float dot
// product moves log w by about δx / ((α−1)·(x − τ)). Every fp32 implementation whose dot product sums in another
// order lands elsewhere inside that uncertainty, so a backend's o and lse may differ from the reference by more
// than the naive same-precision run does (that run sums in nearly the reference's order). The budget bounds it:
// per query head, every x_c may move by float_x_error and τ by as much again (τ is monotone in each x and
// shifts with a common shift of all of them), plus the solver's own 1e-6·max(1, |τ|); each ŵ_c then lies in
// [(u − s)_+^p, (u + s)_+^p] with u = x − τ, p = 1/(α−1), narrowed by Σ ŵ = 1 (to the contract's 1e-5); the
// group weight's interval gives log(w'/w) (clamped at ±kLogCap where w may vanish) and from it the bias change:
// raw: log(w'/w); estimate_diagonal: (log(w'/w) − δμ)/σ with δμ within the mean of those intervals; none: 0.
struct BiasBudget {
  static constexpr double kLogCap = 50.0;
  int64_t n_q = 0, h_kv = 0, num_complete = 0;
  std::vector<double> log_ratio_lo, log_ratio_hi;  // log(w'/w) per routed chunk   [n_q][h_kv][num_complete]
  std::vector<double> lo, hi;                      // bias change d' − d per routed chunk, same layout
  std::vector<double> row;                         // Δ = max |d' − d| over the row's routed chunks [n_q][h_kv]

  size_t at(int64_t i, int64_t r, int64_t c) const { return static_cast<size_t>((i * h_kv + r) * num_complete + c); }
  double delta(int64_t i, int64_t r) const { return row[i * h_kv + r]; }
  double max_delta() const;
};
BiasBudget bias_budget(const Routing& rt, const Method& m, int64_t d);

// ---------------------------------------------------------------------------------------------------------------
// Stage 2 and dense attention.
struct Attention {
  int64_t n_q = 0, h_q = 0, d = 0;
  std::vector<double> o;    // [n_q][h_q][d]
  std::vector<double> lse;  // [n_q][h_q]
};

// Bias form: softmax(scale·⟨q, k⟩ + d) over S_i.
Attention attend(const Sequence& s, const Routing& rt, const Method& m);
// The paper's form for PriorMode::kEstimateDiagonal: p_route ∝ g_σ(w)_j · exp(z_j) with w', λ_i = sigmoid(KL +
// log |R|/|D|). Its lse is log Σ g·exp(z), the KL form's own normalizer (the bias form's lse minus log-shift A).
Attention attend_kl_prior(const Sequence& s, const Routing& rt, const Method& m);
// Dense causal attention, bottom-right aligned.
Attention dense_causal(const Sequence& s, double scale);

// Extra error of o and lse that a bias change within the budget causes, per element, exactly (not to first order):
// with p_j the float64 softmax and e^{d'−d} in [e^lo, e^hi] per key (1 on the diagonal branch),
// |δlse| ≤ max(log Σ p·e^hi, −log Σ p·e^lo) ≤ Δ and |δo_e| ≤ Σ_j p_j·|p'_j/p_j − 1|·|v_je| ≤ (e^{2Δ} − 1)·max|v_e|.
struct Allowance {
  std::vector<double> o;    // [n_q][h_q][d]
  std::vector<double> lse;  // [n_q][h_q]
};
Allowance bias_allowance(const Sequence& s, const Routing& rt, const Method& m, const BiasBudget& budget);

// "Same-precision naive": the same function computed the way a straightforward low-precision kernel would:
// scores, softmax and accumulation in float, probabilities rounded to the input dtype before P·V, output rounded
// to out_dtype. Its distance to the float64 result sets the tolerance of a backend (the FlashAttention rule).
// The attended set comes from rt; the bias from bias_rt (the float routing) where it routes the chunk too.
Attention attend_same_precision(const Sequence& s, const Routing& rt, const Routing& bias_rt, const Method& m,
                                DType in_dtype, DType out_dtype);
// Same, with the bias of rt itself.
Attention attend_same_precision(const Sequence& s, const Routing& rt, const Method& m, DType in_dtype,
                                DType out_dtype);
Attention dense_causal_same_precision(const Sequence& s, double scale, DType in_dtype, DType out_dtype);

// All three stages.
struct Result {
  std::vector<double> summaries;
  Routing routing;
  Attention attention;
};
Result forward(const Sequence& s, const Method& m, int64_t mask_words = 0);

// ---------------------------------------------------------------------------------------------------------------
// Host problems in a library layout: buffers in a dtype, views onto them, and the per-sequence slicing.

enum class Layout : uint8_t { kBNHD, kBHND };

struct ProblemSpec {
  int64_t batch = 1;
  int64_t n_q = 64, n_k = 64;  // padded lengths (ignored for varlen)
  int64_t h_q = 4, h_kv = 1, d = 64;
  DType dtype = DType::kBF16;
  Layout layout = Layout::kBNHD;
  // Padded batch with per-sequence lengths (size batch) when non-empty.
  std::vector<int32_t> seqlens_q, seqlens_k;
  // Packed varlen when non-empty (size = number of sequences): the lengths that become cu_seqlens.
  std::vector<int32_t> varlen_q, varlen_k;
  bool zero_summary_query = false;  // mean pooling
  double q_std = 1.0, k_std = 1.0, v_std = 1.0, summary_query_std = 1.0;
  uint64_t seed = 1;
};

// A host buffer with a view onto it (copies re-point the view at their own bytes).
struct HostTensor {
  std::vector<unsigned char> bytes;
  TensorView view;

  HostTensor() = default;
  HostTensor(const HostTensor& o) : bytes(o.bytes), view(o.view) { repoint(o); }
  HostTensor& operator=(const HostTensor& o) {
    bytes = o.bytes;
    view = o.view;
    repoint(o);
    return *this;
  }
  HostTensor(HostTensor&&) = default;  // a moved vector keeps its buffer
  HostTensor& operator=(HostTensor&&) = default;

 private:
  void repoint(const HostTensor& o) { view.data = o.view.data ? bytes.data() : nullptr; }
};
HostTensor make_host_tensor(DType dtype, std::vector<int64_t> shape);
// [b, h, n, d] storage seen as the logical [b, n, h, d] view.
HostTensor make_host_tensor_bhnd(DType dtype, int64_t b, int64_t n, int64_t h, int64_t d);

// Rows of one sequence inside the library's tensors.
struct Span {
  int64_t batch_index = 0;  // b index (0 for varlen)
  int64_t q_begin = 0, n_q = 0;
  int64_t k_begin = 0, n_k = 0;
};

struct Problem {
  ProblemSpec spec;
  HostTensor q, k, v, summary_query;  // summary_query undefined when zero_summary_query
  std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqlens_q, seqlens_k;

  bool varlen() const { return !cu_seqlens_q.empty(); }
  int64_t num_sequences() const;
  int64_t padded_n_q() const;  // q rows per batch entry, or max_seqlen_q for varlen
  int64_t padded_n_k() const;
  int64_t rows_q() const;      // rows on q's sequence axis (total for varlen)
  BatchLayout layout() const;  // pointers into this object's host vectors
  Span span(int64_t s) const;
  Sequence sequence(int64_t s) const;
};

// Normal q, k, v and summary query from a seeded std::mt19937_64, stored in spec.dtype.
Problem make_problem(const ProblemSpec& spec);

// Reads a sequence from host views (any dtype, any strides with the logical [b, n, h, d] order; rank 3 varlen
// views are [total, h, d]). summary_query may be undefined.
Sequence load_sequence(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& summary_query, const Span& span);
// Element (b, n, h, e) of a rank-4 (or rank-3 [n, h, e]) host view as double.
double load_element(const TensorView& t, int64_t b, int64_t n, int64_t h, int64_t e);

// ---------------------------------------------------------------------------------------------------------------
// Comparisons.

struct ErrorStats {
  double max_abs = 0, mean_abs = 0;
  int64_t count = 0, nonfinite = 0;
  void add(double got, double want);
  // Counts only the part of the error beyond the allowance.
  void add(double got, double want, double allowance);
  void finish();  // turns the running sum into the mean
  double sum_abs = 0;
};

// err(got vs fp64) ≤ 2·err(same-precision naive vs fp64) + atol, for both the max and the mean, no NaN/inf.
// An element may carry an allowance (the bias budget of its row): the rule then judges the error beyond it.
struct ToleranceCheck {
  ErrorStats got, naive;
  ErrorStats excess;  // max(0, |got − want| − allowance) per element; equal to got where no allowance is given
  double atol = 0;
  double max_allowance = 0;
  bool pass() const;
  // The bound the max error must meet without any allowance.
  double strict_bound() const { return 2.0 * naive.max_abs + atol; }
  std::string describe() const;
};
// allowance is empty (none) or one value per element.
ToleranceCheck check_tolerance(const std::vector<double>& got, const std::vector<double>& want,
                               const std::vector<double>& naive, double atol,
                               const std::vector<double>& allowance = {});

// Default absolute slack of the tolerance rule for an output dtype.
double default_atol(DType out_dtype);

// Spacing of the dtype's values at a magnitude (subnormal spacing below the normal range).
double dtype_spacing(double magnitude, DType dtype);
// Distance in units of the dtype's spacing at the larger magnitude of a and b (0 when equal).
double ulp_distance(double a, double b, DType dtype);
// Whether two outputs of one backend that summed in different orders (prefill vs decode, a batch vs one
// sequence) agree: 16-bit outputs at most one unit apart after rounding, f32 outputs within fp32 summation noise.
bool agree_across_paths(double a, double b, DType out_dtype);

}  // namespace dashattn::ref
