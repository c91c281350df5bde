// Batches of different lengths: packed varlen (cu_seqlens) and padded batches with per-sequence lengths give, on
// every sequence, what a batch of that one sequence gives; padding yields o = 0, lse = -inf and no NaN anywhere.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dashattn/dashattn.h"
#include "reference/checks.h"

using namespace dashattn;

namespace {

// Sequence s of a batch as a standalone batch of one (same values, contiguous [1, n, h, d]).
ref::Problem extract_sequence(const ref::Problem& pr, int64_t s) {
  const ref::Span sp = pr.span(s);
  ref::ProblemSpec spec = pr.spec;
  spec.batch = 1;
  spec.n_q = sp.n_q;
  spec.n_k = sp.n_k;
  spec.layout = ref::Layout::kBNHD;
  spec.seqlens_q.clear();
  spec.seqlens_k.clear();
  spec.varlen_q.clear();
  spec.varlen_k.clear();
  ref::Problem one = ref::make_problem(spec);
  const DType t = spec.dtype;
  const int64_t es = dtype_size(t);
  auto copy_rows = [&](const ref::HostTensor& from, ref::HostTensor& to, int64_t begin, int64_t rows) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t h = 0; h < to.view.shape[2]; ++h)
        for (int64_t e = 0; e < to.view.shape[3]; ++e)
          store_from_float(to.bytes.data() + to.view.offset(0, i, h, e) * es, t,
                           static_cast<float>(ref::load_element(from.view, sp.batch_index, begin + i, h, e)));
  };
  copy_rows(pr.q, one.q, sp.q_begin, sp.n_q);
  copy_rows(pr.k, one.k, sp.k_begin, sp.n_k);
  copy_rows(pr.v, one.v, sp.k_begin, sp.n_k);
  if (pr.summary_query.view.defined()) one.summary_query = pr.summary_query;
  return one;
}

struct Agreement {
  double worst_o_ulps = 0;
  int64_t o_not_bitwise = 0, o_disagree = 0, lse_diff = 0, mask_diff = 0, active_diff = 0, summary_diff = 0;
};

// The batch's rows of sequence s against the standalone run of that sequence.
// How far two correct kernel plans may put one o element apart. The CPU backend is batch invariant: 1 ulp. A
// GPU backend may split the KV axis differently for a sequence alone than inside a batch; P is rounded to the
// input dtype before P·V (as in FlashAttention) after normalizing by each split's own running maximum, so the
// two runs differ by up to one rounding of P: |Δo| ≤ ε_P · max|v| (Σ|Δp| ≤ ε_P), plus an output rounding each.
struct PathTolerance {
  bool batch_invariant = true;
  double p_rounding = 0.0;  // ε_P · max|v|
  bool agree(double a, double b, DType out_dtype) const {
    if (batch_invariant || !std::isfinite(a) || !std::isfinite(b)) return ref::agree_across_paths(a, b, out_dtype);
    const double unit = ref::dtype_spacing(std::max(std::fabs(a), std::fabs(b)), out_dtype);
    return std::fabs(a - b) <= p_rounding + 2.0 * unit;
  }
};

PathTolerance path_tolerance(const Backend& be, const ref::Problem& pr) {
  PathTolerance t;
  t.batch_invariant = be.device_type() == DeviceType::kCpu;
  double max_v = 0.0;
  const TensorView& v = pr.v.view;
  for (int64_t e = 0; e < v.numel(); ++e) {
    max_v = std::max(max_v, std::fabs(static_cast<double>(
                                load_as_float(static_cast<const unsigned char*>(v.data) + e * dtype_size(v.dtype),
                                              v.dtype))));
  }
  const double eps_p = pr.spec.dtype == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  t.p_rounding = eps_p * max_v;
  return t;
}

void compare_sequence(const ref::Problem& pr, const ref::ForwardOutputs& batch, int64_t s,
                      const ref::ForwardOutputs& one, DType out_dtype, int64_t chunk, const PathTolerance& tol,
                      Agreement* a) {
  const ref::Span sp = pr.span(s);
  const int64_t h_q = pr.spec.h_q, h_kv = pr.spec.h_kv, d = pr.spec.d;
  for (int64_t i = 0; i < sp.n_q; ++i) {
    const int64_t row = sp.q_begin + i;
    for (int64_t h = 0; h < h_q; ++h) {
      for (int64_t e = 0; e < d; ++e) {
        const double got = ref::load_element(batch.o.view, sp.batch_index, row, h, e);
        const double want = ref::load_element(one.o.view, 0, i, h, e);
        a->worst_o_ulps =
            std::max(a->worst_o_ulps, std::isfinite(got) ? ref::ulp_distance(got, want, out_dtype) : 1e30);
        a->o_not_bitwise += got != want;
        a->o_disagree += tol.agree(got, want, out_dtype) ? 0 : 1;
      }
      const float lb = static_cast<const float*>(batch.lse.view.data)[batch.lse.view.offset(sp.batch_index, h, row)];
      const float lo = static_cast<const float*>(one.lse.view.data)[one.lse.view.offset(0, h, i)];
      a->lse_diff += std::fabs(lb - lo) <= 2e-6f * std::max(1.0f, std::fabs(lo)) ? 0 : 1;
    }
    for (int64_t r = 0; r < h_kv; ++r) {
      // The batch's rows may be wider (words of the longest sequence); the extra words must be zero.
      const TensorView& mb = batch.mask.view;
      const TensorView& mo = one.mask.view;
      for (int64_t w = 0; w < mb.shape[3]; ++w) {
        const uint32_t got = static_cast<const uint32_t*>(mb.data)[mb.offset(sp.batch_index, r, row, w)];
        const uint32_t want = w < mo.shape[3] ? static_cast<const uint32_t*>(mo.data)[mo.offset(0, r, i, w)] : 0u;
        a->mask_diff += got != want;
      }
      const TensorView& ab = batch.active.view;
      const TensorView& ao = one.active.view;
      a->active_diff += static_cast<const int32_t*>(ab.data)[ab.offset(sp.batch_index, r, row)] !=
                        static_cast<const int32_t*>(ao.data)[ao.offset(0, r, i)];
    }
  }
  // Summaries: each sequence's chunk grid starts at its own first key.
  const int64_t es = dtype_size(pr.spec.dtype);
  for (int64_t c = 0; c < sp.n_k / chunk; ++c)
    for (int64_t r = 0; r < h_kv; ++r)
      a->summary_diff += std::memcmp(batch.summaries.bytes.data() + batch.summaries.view.offset(s, c, r, 0) * es,
                                     one.summaries.bytes.data() + one.summaries.view.offset(0, c, r, 0) * es,
                                     static_cast<size_t>(d * es)) != 0;
}

// Runs the batch and each of its sequences alone on every available backend and compares.
void run_batch_against_sequences(const ref::Problem& pr, const MethodParams& method, DType out_dtype) {
  std::vector<std::string> unavailable;
  const std::vector<Backend*> backends = ref::available_backends(&unavailable);
  for (const std::string& line : unavailable) MESSAGE("backend unavailable, skipped (not counted): " << line);
  REQUIRE(!backends.empty());
  for (Backend* be : backends) {
    const std::string name = be->name();
    INFO(name);
    ref::RunOptions opt;
    opt.out_dtype = out_dtype;
    const ref::RunResult batch = ref::run_forward(*be, pr, method, opt);
    if (batch.unsupported) {
      MESSAGE(name << " unsupported, skipped (not counted): " << batch.reason);
      CHECK(be->device_type() != DeviceType::kCpu);
      continue;
    }
    // Against the float64 reference (this also checks padding rows: o = 0, lse = -inf, mask 0).
    const ref::CheckReport rep = ref::check_forward(pr, method, batch.out);
    std::string failures;
    for (const std::string& f : rep.failures) failures += "\n  " + f;
    CHECK_MESSAGE(rep.pass(), rep.summary() << failures);

    // No NaN anywhere in o or lse, padding included.
    int64_t nan_count = 0;
    const TensorView& o = batch.out.o.view;
    const int64_t o_elems = static_cast<int64_t>(batch.out.o.bytes.size()) / dtype_size(o.dtype);
    for (int64_t e = 0; e < o_elems; ++e)
      nan_count += std::isnan(load_as_float(batch.out.o.bytes.data() + e * dtype_size(o.dtype), o.dtype));
    for (size_t e = 0; e < batch.out.lse.bytes.size() / 4; ++e)
      nan_count += std::isnan(static_cast<const float*>(batch.out.lse.view.data)[e]);
    CHECK(nan_count == 0);

    Agreement a;
    for (int64_t s = 0; s < pr.num_sequences(); ++s) {
      if (pr.span(s).n_q == 0) continue;  // nothing to run alone; its rows are covered by the checks above
      const ref::Problem one = extract_sequence(pr, s);
      const ref::RunResult alone = ref::run_forward(*be, one, method, opt);
      REQUIRE_FALSE(alone.unsupported);
      compare_sequence(pr, batch.out, s, alone.out, out_dtype, method.chunk_size, path_tolerance(*be, pr), &a);
    }
    MESSAGE(name << ": batch vs per-sequence o worst " << a.worst_o_ulps << " ulp, " << a.o_not_bitwise
                 << " elements not bitwise equal");
    CHECK(a.o_disagree == 0);
    CHECK(a.lse_diff == 0);
    CHECK(a.mask_diff == 0);
    CHECK(a.active_diff == 0);
    CHECK(a.summary_diff == 0);
  }
}

// Writes NaN into every padding row of q, k and v: a backend that reads padding shows it in its outputs.
void poison_padding(ref::Problem& pr) {
  const int64_t es = dtype_size(pr.spec.dtype);
  auto poison_rows = [&](ref::HostTensor& t, int64_t b, int64_t from) {
    for (int64_t i = from; i < t.view.shape[1]; ++i)
      for (int64_t h = 0; h < t.view.shape[2]; ++h)
        for (int64_t e = 0; e < t.view.shape[3]; ++e)
          store_from_float(t.bytes.data() + t.view.offset(b, i, h, e) * es, pr.spec.dtype,
                           std::numeric_limits<float>::quiet_NaN());
  };
  for (int64_t b = 0; b < pr.spec.batch; ++b) {
    poison_rows(pr.q, b, pr.seqlens_q[b]);
    poison_rows(pr.k, b, pr.seqlens_k[b]);
    poison_rows(pr.v, b, pr.seqlens_k[b]);
  }
}

}  // namespace

TEST_CASE("packed varlen equals per-sequence runs") {
  for (ref::Layout layout : {ref::Layout::kBNHD, ref::Layout::kBHND}) {
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      ref::ProblemSpec spec;
      // Lengths around chunk boundaries, a decode-like sequence (n_q < n_k), a one-token and an empty one.
      spec.varlen_q = {1, 65, 3, 130, 0, 17, 64};
      spec.varlen_k = {1, 65, 200, 130, 9, 40, 64};
      spec.h_q = 8;
      spec.h_kv = 2;
      spec.d = 64;
      spec.dtype = dtype;
      spec.layout = layout;
      spec.seed = 31;
      const ref::Problem pr = ref::make_problem(spec);
      MethodParams method;
      method.chunk_size = 16;
      method.gamma = 12.0f;
      method.sigma = 1.0f;
      INFO((layout == ref::Layout::kBHND ? "[h, total, d] storage" : "[total, h, d] storage") << " "
           << std::string(dtype_name(dtype)));
      run_batch_against_sequences(pr, method, dtype);
    }
  }
}

TEST_CASE("padded batches with per-sequence lengths equal per-sequence runs; padding gives o = 0, lse = -inf") {
  for (PriorMode prior : {PriorMode::kEstimateDiagonal, PriorMode::kRaw, PriorMode::kNone}) {
    ref::ProblemSpec spec;
    spec.batch = 4;
    spec.n_q = spec.n_k = 130;
    spec.seqlens_q = {130, 1, 50, 0};
    spec.seqlens_k = {130, 77, 50, 10};
    spec.h_q = 4;
    spec.h_kv = 1;
    spec.d = 128;
    spec.dtype = DType::kF16;
    spec.seed = 8;
    ref::Problem pr = ref::make_problem(spec);
    poison_padding(pr);
    MethodParams method;
    method.chunk_size = 32;
    method.gamma = 8.0f;
    method.sigma = 0.5f;
    method.prior = prior;
    INFO("prior " << std::string(prior_mode_name(prior)));
    run_batch_against_sequences(pr, method, DType::kF32);
  }
}
