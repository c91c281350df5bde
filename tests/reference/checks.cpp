#include "reference/checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "dashattn/dashattn.h"

namespace dashattn::ref {

namespace {

// Bytes that decode as NaN in every float dtype and as an absurd integer: anything left unwritten shows.
void poison(HostTensor& t) { std::memset(t.bytes.data(), 0xff, t.bytes.size()); }

template <typename T>
T read3(const TensorView& t, int64_t a, int64_t b, int64_t c) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(t.data) + t.offset(a, b, c) * sizeof(T), sizeof(T));
  return v;
}

uint32_t read_mask_word(const TensorView& t, int64_t b, int64_t r, int64_t row, int64_t w) {
  uint32_t v;
  std::memcpy(&v, static_cast<const unsigned char*>(t.data) + t.offset(b, r, row, w) * 4, 4);
  return v;
}

std::string where(int64_t s, int64_t i, int64_t r) {
  std::ostringstream os;
  os << "seq " << s << " query " << i << " kv head " << r;
  return os.str();
}

}  // namespace

std::string byte_difference(const HostTensor& got, const HostTensor& want) {
  if (got.bytes.size() != want.bytes.size()) {
    return "sizes differ: " + got.view.shape_string() + " against " + want.view.shape_string();
  }
  const auto diff = std::mismatch(got.bytes.begin(), got.bytes.end(), want.bytes.begin());
  if (diff.first == got.bytes.end()) return "";
  const int64_t at = (diff.first - got.bytes.begin()) / std::max(1, dtype_size(got.view.dtype));
  return "first difference at element " + std::to_string(at) + " of " + got.view.shape_string();
}

std::vector<std::string> byte_differences(const ForwardOutputs& got, const ForwardOutputs& want) {
  const std::pair<const char*, const HostTensor ForwardOutputs::*> outputs[] = {
      {"o", &ForwardOutputs::o},       {"lse", &ForwardOutputs::lse}, {"mask", &ForwardOutputs::mask},
      {"tau", &ForwardOutputs::tau},   {"mu", &ForwardOutputs::mu},   {"active_chunks", &ForwardOutputs::active},
      {"summaries", &ForwardOutputs::summaries}};
  std::vector<std::string> lines;
  for (const auto& [name, member] : outputs) {
    const std::string d = byte_difference(got.*member, want.*member);
    if (!d.empty()) lines.push_back(std::string(name) + ": " + d);
  }
  return lines;
}

RunResult run_forward(Backend& backend, const Problem& pr, const MethodParams& method, const RunOptions& opt) {
  const ProblemSpec& sp = pr.spec;
  const int64_t b = pr.varlen() ? 1 : sp.batch, rows = pr.rows_q();
  const int64_t words = mask_words(pr.padded_n_k(), method.chunk_size);
  const int64_t chunks = std::max<int64_t>(num_complete_chunks(pr.padded_n_k(), method.chunk_size), 1);

  RunResult res;
  ForwardOutputs& out = res.out;
  out.out_dtype = opt.out_dtype;
  if (pr.varlen()) out.o = make_host_tensor(opt.out_dtype, {rows, sp.h_q, sp.d});
  else if (sp.layout == Layout::kBHND) out.o = make_host_tensor_bhnd(opt.out_dtype, b, rows, sp.h_q, sp.d);
  else out.o = make_host_tensor(opt.out_dtype, {b, rows, sp.h_q, sp.d});
  if (opt.with_lse) out.lse = make_host_tensor(DType::kF32, {b, sp.h_q, rows});
  if (opt.routing_outputs) {
    out.mask = make_host_tensor(DType::kU32, {b, sp.h_kv, rows, words});
    out.tau = make_host_tensor(DType::kF32, {b, sp.h_q, rows});
    out.mu = make_host_tensor(DType::kF32, {b, sp.h_kv, rows});
    out.active = make_host_tensor(DType::kI32, {b, sp.h_kv, rows});
  }
  if (opt.caller_summaries) out.summaries = make_host_tensor(sp.dtype, {pr.num_sequences(), chunks, sp.h_kv, sp.d});
  for (HostTensor* t : {&out.o, &out.lse, &out.mask, &out.tau, &out.mu, &out.active, &out.summaries})
    if (t->view.defined()) poison(*t);

  DeviceProblem dev = upload_problem(backend, pr);
  DeviceTensor o = upload(backend, out.o), lse = upload(backend, out.lse), mask = upload(backend, out.mask),
               tau = upload(backend, out.tau), mu = upload(backend, out.mu), active = upload(backend, out.active),
               summaries = upload(backend, out.summaries);
  ForwardParams p = forward_inputs(dev, method);
  p.summaries = summaries.view;
  p.o = o.view;
  p.lse = lse.view;
  p.routing.mask = mask.view;
  p.routing.tau = tau.view;
  p.routing.mu = mu.view;
  p.routing.active_chunks = active.view;
  DeviceTensor pool_k, pool_v;
  DeviceBuffer table;
  if (opt.page_size > 0) {
    const PagePool pool = make_pool(pr, opt.page_size, opt.page_seed, opt.share_first_page);
    pool_k = upload(backend, pool.k);
    pool_v = upload(backend, pool.v);
    table = upload_ints(backend, pool.table);
    p.k = pool_k.view;
    p.v = pool_v.view;
    p.batch = pool.on(p.batch, static_cast<const int32_t*>(table.data()), pr);
  }
  try {
    forward(backend, p);
  } catch (const Unsupported& e) {
    res.unsupported = true;
    res.reason = e.what();
    return res;
  }
  download(backend, o, out.o);
  if (opt.with_lse) download(backend, lse, out.lse);
  if (opt.routing_outputs) {
    download(backend, mask, out.mask);
    download(backend, tau, out.tau);
    download(backend, mu, out.mu);
    download(backend, active, out.active);
  }
  if (opt.caller_summaries) download(backend, summaries, out.summaries);
  return res;
}

std::string CheckReport::summary() const {
  std::ostringstream os;
  os << rows << " rows, " << tie_rows << " tie rows (" << tie_flips << " tie flips of " << ties_seen
     << " ties, " << near_tie_flips << " flips within float rounding of x); bias budget: Δ up to " << max_budget
     << ", lse allowance up to " << lse.max_allowance << ", " << widened_rows << " rows widened, "
     << budget_needed_rows << " rows needed it; o " << o.describe() << "; lse "
     << lse.describe();
  return os.str();
}

std::vector<double> checked_summaries(const Problem& pr, const MethodParams& method, const ForwardOutputs& out,
                                      int64_t s) {
  const Sequence seq = pr.sequence(s);
  const Method m = Method::from(method);
  std::vector<double> summaries = summarize(seq, m);
  if (out.summaries.view.defined())
    for (int64_t c = 0; c < seq.n_k / m.chunk; ++c)
      for (int64_t r = 0; r < seq.h_kv; ++r)
        for (int64_t e = 0; e < seq.d; ++e)
          summaries[(c * seq.h_kv + r) * seq.d + e] = load_element(out.summaries.view, s, c, r, e);
  return summaries;
}

CheckReport check_forward(const Problem& pr, const MethodParams& method, const ForwardOutputs& out,
                          const CheckOptions& opt) {
  CheckReport rep;
  const Method m = Method::from(method);
  const int64_t C = m.chunk;
  const DType dtype = pr.spec.dtype;
  auto fail = [&](const std::string& line) {
    if (static_cast<int>(rep.failures.size()) < opt.max_failure_lines) rep.failures.push_back(line);
    else if (static_cast<int>(rep.failures.size()) == opt.max_failure_lines) rep.failures.push_back("...");
  };
  std::vector<double> o_got, o_ref, o_naive, lse_got, lse_ref, lse_naive, dense_ref, dense_naive;
  std::vector<double> o_allow, lse_allow;
  std::vector<int64_t> o_row, lse_row;  // compared row of each element, for counting rows
  int64_t row_id = 0;
  const double o_atol = default_atol(out.out_dtype), lse_atol = 1e-4;
  std::vector<char> widened;
  int64_t summary_mismatches = 0;

  for (int64_t s = 0; s < pr.num_sequences(); ++s) {
    const Span sp = pr.span(s);
    const Sequence seq = pr.sequence(s);
    const int64_t nc = seq.n_k / C;

    // Stage 0: the backend's summaries against the reference's, then route from the backend's.
    std::vector<double> abs_weighted;
    std::vector<double> summaries = summarize(seq, m, &abs_weighted);
    if (out.summaries.view.defined()) {
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t r = 0; r < seq.h_kv; ++r)
          for (int64_t e = 0; e < seq.d; ++e) {
            double& want = summaries[(c * seq.h_kv + r) * seq.d + e];
            const double got = load_element(out.summaries.view, s, c, r, e);
            // One unit of the key dtype (the fp32 sum may sit on the other side of a rounding boundary), plus the
            // fp32 accumulation error, which dominates a component that nearly cancels.
            const double accumulation = 8.0 * std::sqrt(double(C)) * std::ldexp(1.0, -24) *
                                        abs_weighted[(c * seq.h_kv + r) * seq.d + e];
            const double unit = dtype_spacing(std::max(std::fabs(got), std::fabs(want)), dtype);
            const bool close = std::fabs(got - want) <= unit + accumulation;
            if (!close || !std::isfinite(got)) {
              if (++summary_mismatches <= 3) {
                std::ostringstream os;
                os << "summary seq " << s << " chunk " << c << " kv head " << r << " dim " << e << ": got " << got
                   << ", want " << want;
                fail(os.str());
              }
            }
            want = got;
          }
    }
    const int64_t words = out.mask.view.defined() ? out.mask.view.shape[3] : 0;
    const Routing rt = route(seq, summaries, m, words);
    rep.ties_seen += static_cast<int64_t>(rt.ties.size());

    // Stage 1: mask bits, active counts, thresholds.
    std::vector<char> excluded(seq.n_q * seq.h_kv, 0);
    if (out.mask.view.defined()) {
      for (int64_t i = 0; i < seq.n_q; ++i) {
        const int64_t row = sp.q_begin + i;
        for (int64_t r = 0; r < seq.h_kv; ++r) {
          int popcount = 0;
          for (int64_t w = 0; w < words; ++w) {
            const uint32_t got = read_mask_word(out.mask.view, sp.batch_index, r, row, w);
            const uint32_t want = rt.mask_row(r, i)[w];
            popcount += __builtin_popcount(got);
            for (int bit = 0; bit < 32; ++bit) {
              if (((got ^ want) >> bit & 1u) == 0) continue;
              const int64_t c = w * 32 + bit;
              const bool tie = c < rt.diagonal[i] && rt.group_tie(i, r, c);
              const bool near_tie = !tie && c < rt.diagonal[i] && rt.group_near_tie(i, r, c, seq.d);
              std::ostringstream os;
              os << where(s, i, r) << " chunk " << c << ": got bit " << ((got >> bit) & 1u) << ", want "
                 << ((want >> bit) & 1u);
              if (tie || near_tie) {
                ++(tie ? rep.tie_flips : rep.near_tie_flips);
                excluded[i * seq.h_kv + r] = 1;
                rep.tie_lines.push_back(os.str() + (tie ? " (tie)" : " (within float rounding of x)"));
              } else {
                if (c < rt.diagonal[i]) os << " (w " << rt.w(i, r, c) << ")";
                fail("mask " + os.str());
              }
            }
          }
          if (out.active.view.defined() && !excluded[i * seq.h_kv + r]) {
            const int32_t got = read3<int32_t>(out.active.view, sp.batch_index, r, row);
            if (got != rt.active[r * seq.n_q + i] || got != popcount) {
              std::ostringstream os;
              os << "active " << where(s, i, r) << ": got " << got << ", want " << rt.active[r * seq.n_q + i]
                 << " (mask popcount " << popcount << ")";
              fail(os.str());
            }
          }
        }
        if (out.tau.view.defined() && rt.diagonal[i] > 0) {
          for (int64_t h = 0; h < seq.h_q; ++h) {
            const double got = read3<float>(out.tau.view, sp.batch_index, h, row);
            const double want = rt.tau[i * seq.h_q + h];
            // τ in float (2^-24 relative) on x carrying the rounding of float dot products.
            const double tol = 1e-6 * std::max(1.0, std::fabs(want)) + 2.0 * rt.float_x_error(i, h, seq.d);
            if (!(std::fabs(got - want) <= tol)) {
              std::ostringstream os;
              os << "tau seq " << s << " query " << i << " head " << h << ": got " << got << ", want " << want
                 << " (tolerance " << tol << ")";
              fail(os.str());
            }
          }
        }
      }
    }
    for (int64_t i = 0; i < seq.n_q; ++i)
      for (int64_t r = 0; r < seq.h_kv; ++r) rep.tie_rows += excluded[i * seq.h_kv + r];

    // Stage 2: o and lse on the rows without tie flips.
    const Attention want = attend(seq, rt, m);
    const Routing float_rt = route_same_precision(seq, summaries, m, words);
    const Attention naive = attend_same_precision(seq, rt, float_rt, m, dtype, out.out_dtype);
    const BiasBudget budget = bias_budget(rt, m, seq.d);
    const Allowance allow = bias_allowance(seq, rt, m, budget);
    Attention dense, dense_np;
    if (opt.dense_too) {
      dense = dense_causal(seq, m.resolved_scale(seq.d));
      dense_np = dense_causal_same_precision(seq, m.resolved_scale(seq.d), dtype, out.out_dtype);
    }
    for (int64_t i = 0; i < seq.n_q; ++i) {
      for (int64_t r = 0; r < seq.h_kv; ++r)
        if (!excluded[i * seq.h_kv + r]) rep.max_budget = std::max(rep.max_budget, budget.delta(i, r));
      for (int64_t h = 0; h < seq.h_q; ++h) {
        const int64_t r = h / seq.group();
        if (excluded[i * seq.h_kv + r]) continue;
        const int64_t row = sp.q_begin + i, id = row_id + r;
        if (static_cast<int64_t>(widened.size()) <= id) widened.resize(id + 1, 0);
        for (int64_t e = 0; e < seq.d; ++e) {
          const size_t at = (i * seq.h_q + h) * seq.d + e;
          o_got.push_back(load_element(out.o.view, sp.batch_index, row, h, e));
          o_ref.push_back(want.o[at]);
          o_naive.push_back(naive.o[at]);
          o_allow.push_back(allow.o[at]);
          o_row.push_back(id);
          if (allow.o[at] > o_atol) widened[id] = 1;
          if (opt.dense_too) {
            dense_ref.push_back(dense.o[at]);
            dense_naive.push_back(dense_np.o[at]);
          }
        }
        if (out.lse.view.defined()) {
          lse_got.push_back(read3<float>(out.lse.view, sp.batch_index, h, row));
          lse_ref.push_back(want.lse[i * seq.h_q + h]);
          lse_naive.push_back(naive.lse[i * seq.h_q + h]);
          lse_allow.push_back(allow.lse[i * seq.h_q + h]);
          lse_row.push_back(id);
          if (allow.lse[i * seq.h_q + h] > lse_atol) widened[id] = 1;
        }
      }
      rep.rows += seq.h_kv;
      row_id += seq.h_kv;
    }

    // Padding rows of a padded batch: zeros, −inf, empty mask.
    if (!pr.varlen()) {
      for (int64_t row = seq.n_q; row < pr.padded_n_q(); ++row) {
        for (int64_t h = 0; h < seq.h_q; ++h) {
          bool zero = true;
          for (int64_t e = 0; e < seq.d; ++e) zero = zero && load_element(out.o.view, s, row, h, e) == 0.0;
          if (!zero) fail("padding o " + where(s, row, h / seq.group()) + " head " + std::to_string(h) + " not 0");
          if (out.lse.view.defined()) {
            const float l = read3<float>(out.lse.view, s, h, row);
            if (!(std::isinf(l) && l < 0)) fail("padding lse seq " + std::to_string(s) + " row " + std::to_string(row) +
                                                ": got " + std::to_string(l) + ", want -inf");
          }
        }
        if (out.mask.view.defined())
          for (int64_t r = 0; r < seq.h_kv; ++r)
            for (int64_t w = 0; w < words; ++w)
              if (read_mask_word(out.mask.view, s, r, row, w) != 0u) fail("padding mask " + where(s, row, r) + " not 0");
      }
    }
  }
  if (summary_mismatches > 0) fail("summaries: " + std::to_string(summary_mismatches) + " elements differ");

  rep.o = check_tolerance(o_got, o_ref, o_naive, o_atol, o_allow);
  if (!rep.o.pass()) fail("o: " + rep.o.describe());
  if (!lse_got.empty()) {
    rep.lse = check_tolerance(lse_got, lse_ref, lse_naive, lse_atol, lse_allow);
    if (!rep.lse.pass()) fail("lse: " + rep.lse.describe());
  }
  // Rows that the strict rule alone would fail: they pass (or not) only through their budget.
  std::vector<char> needed(widened.size(), 0);
  auto mark_needed = [&](const std::vector<double>& got, const std::vector<double>& ref,
                         const std::vector<int64_t>& rows, double bound) {
    for (size_t k = 0; k < got.size(); ++k)
      if (std::fabs(got[k] - ref[k]) > bound) needed[rows[k]] = 1;
  };
  mark_needed(o_got, o_ref, o_row, rep.o.strict_bound());
  if (!lse_got.empty()) mark_needed(lse_got, lse_ref, lse_row, rep.lse.strict_bound());
  for (size_t k = 0; k < widened.size(); ++k) {
    rep.widened_rows += widened[k];
    rep.budget_needed_rows += needed[k];
  }
  if (opt.dense_too) {
    const ToleranceCheck d = check_tolerance(o_got, dense_ref, dense_naive, default_atol(out.out_dtype));
    if (!d.pass()) fail("o vs dense causal attention: " + d.describe());
  }
  return rep;
}

}  // namespace dashattn::ref
