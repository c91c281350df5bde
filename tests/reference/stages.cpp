// Stage 0, Stage 1 and the prior bias of the float64 reference, one formula of semantics.md per loop.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "reference/reference.h"

namespace dashattn::ref {

Method Method::from(const MethodParams& p) {
  Method m;
  m.chunk = p.chunk_size;
  m.alpha = p.alpha;
  m.gamma = p.gamma;
  m.sigma = p.sigma;
  m.scale = p.scale;
  m.prior = p.prior;
  return m;
}

double Method::resolved_scale(int64_t d) const { return scale != 0.0 ? scale : 1.0 / std::sqrt(double(d)); }

Sequence make_sequence(int64_t n_q, int64_t n_k, int64_t h_q, int64_t h_kv, int64_t d, const float* q,
                       const float* k, const float* v, const float* summary_query, DType key_dtype) {
  Sequence s;
  s.n_q = n_q;
  s.n_k = n_k;
  s.h_q = h_q;
  s.h_kv = h_kv;
  s.d = d;
  s.key_dtype = key_dtype;
  s.q.assign(q, q + n_q * h_q * d);
  s.k.assign(k, k + n_k * h_kv * d);
  s.v.assign(v, v + n_k * h_kv * d);
  if (summary_query) s.summary_query.assign(summary_query, summary_query + h_kv * d);
  else s.summary_query.assign(h_kv * d, 0.0);
  return s;
}

namespace {
double dot(const double* a, const double* b, int64_t d) {
  double acc = 0.0;
  for (int64_t e = 0; e < d; ++e) acc += a[e] * b[e];
  return acc;
}
}  // namespace

std::vector<double> summarize(const Sequence& s, const Method& m, std::vector<double>* abs_weighted) {
  const int64_t C = m.chunk, num_complete = s.n_k / C, d = s.d;
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  std::vector<double> out(num_complete * s.h_kv * d, 0.0);
  if (abs_weighted) abs_weighted->assign(out.size(), 0.0);
  for (int64_t c = 0; c < num_complete; ++c) {
    for (int64_t r = 0; r < s.h_kv; ++r) {
      // softmax_t(⟨q̄_r, k_t⟩ / sqrt(d)) over the chunk's keys, which are also the values.
      std::vector<double> logit(C);
      double max_logit = -std::numeric_limits<double>::infinity();
      for (int64_t t = 0; t < C; ++t) {
        logit[t] = dot(&s.summary_query[r * d], s.k_row(c * C + t, r), d) * inv_sqrt_d;
        max_logit = std::max(max_logit, logit[t]);
      }
      double norm = 0.0;
      for (int64_t t = 0; t < C; ++t) norm += std::exp(logit[t] - max_logit);
      double* kbar = &out[(c * s.h_kv + r) * d];
      for (int64_t t = 0; t < C; ++t) {
        const double p = std::exp(logit[t] - max_logit) / norm;
        const double* key = s.k_row(c * C + t, r);
        for (int64_t e = 0; e < d; ++e) kbar[e] += p * key[e];
        if (abs_weighted)
          for (int64_t e = 0; e < d; ++e) (*abs_weighted)[(c * s.h_kv + r) * d + e] += p * std::fabs(key[e]);
      }
      // Stored in the key dtype, as the model saw them in training.
      for (int64_t e = 0; e < d; ++e) kbar[e] = round_to_dtype(static_cast<float>(kbar[e]), s.key_dtype);
    }
  }
  return out;
}

bool Routing::group_tie(int64_t i, int64_t r, int64_t c) const {
  const int64_t g = h_q / h_kv;
  for (const Tie& t : ties)
    if (t.query == i && t.chunk == c && t.head / g == r) return true;
  return false;
}

bool Routing::group_near_tie(int64_t i, int64_t r, int64_t c, int64_t d) const {
  const int64_t g = h_q / h_kv;
  for (int64_t h = r * g; h < (r + 1) * g; ++h) {
    const double tau_h = tau[i * h_q + h];
    if (std::isnan(tau_h)) continue;
    const double band = 1e-6 * std::max(1.0, std::fabs(tau_h)) + 2.0 * float_x_error(i, h, d);
    if (std::fabs(x[(i * h_q + h) * num_complete + c] - tau_h) <= band) return true;
  }
  return false;
}

double Routing::float_x_error(int64_t i, int64_t h, int64_t d) const {
  double largest = 0.0;
  for (int64_t c = 0; c < diagonal[i]; ++c) largest = std::max(largest, x_abs[(i * h_q + h) * num_complete + c]);
  // Rounding of a d-term fp32 sum grows like sqrt(d)·2^-24 in practice; 8× that is a generous but finite bound.
  return 8.0 * std::sqrt(double(d)) * std::ldexp(1.0, -24) * largest;
}

namespace {

// x = (α−1)·γ·⟨q, k̄⟩/sqrt(d) in float, its d terms summed in the given order. The inputs are exact in float
// (they come from 16-bit or float tensors), so only the summation and the scaling round.
float float_x_of(const double* q, const double* kbar, int64_t d, const Method& m, FloatSum order) {
  const float gamma = static_cast<float>(m.gamma), inv_sqrt_d = static_cast<float>(1.0 / std::sqrt(double(d)));
  const float alpha_1 = static_cast<float>(m.alpha - 1.0);
  auto term = [&](int64_t e) { return static_cast<float>(q[e]) * static_cast<float>(kbar[e]); };
  float acc = 0.0f;
  switch (order) {
    case FloatSum::kSequential:
      for (int64_t e = 0; e < d; ++e) acc += term(e);
      break;
    case FloatSum::kReverse:
      for (int64_t e = d - 1; e >= 0; --e) acc += term(e);
      break;
    case FloatSum::kLanes8: {
      float lane[8] = {};
      for (int64_t e = 0; e < d; ++e) lane[e % 8] += term(e);
      for (int width = 4; width >= 1; width /= 2)
        for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
      acc = lane[0];
      break;
    }
    case FloatSum::kPairwise: {
      std::vector<float> level(d);
      for (int64_t e = 0; e < d; ++e) level[e] = term(e);
      while (level.size() > 1) {
        std::vector<float> next((level.size() + 1) / 2);
        for (size_t l = 0; l < next.size(); ++l)
          next[l] = 2 * l + 1 < level.size() ? level[2 * l] + level[2 * l + 1] : level[2 * l];
        level.swap(next);
      }
      acc = d > 0 ? level[0] : 0.0f;
      break;
    }
    case FloatSum::kFmaPrescaled: {
      const float pre = alpha_1 * gamma * inv_sqrt_d;
      for (int64_t e = 0; e < d; ++e)
        acc = std::fma(static_cast<float>(q[e]) * pre, static_cast<float>(kbar[e]), acc);
      return acc;
    }
  }
  return alpha_1 * (acc * gamma * inv_sqrt_d);
}

// Thresholds, group weights, ties, masks, μ and active counts from rt.x (and rt.diagonal).
void settle(Routing& rt, const Method& m) {
  const int64_t nc = rt.num_complete, g = rt.h_q / rt.h_kv;
  rt.tau.assign(rt.n_q * rt.h_q, std::numeric_limits<double>::quiet_NaN());
  rt.weight.assign(rt.n_q * rt.h_kv * nc, 0.0);
  rt.mu.assign(rt.n_q * rt.h_kv, 0.0);
  rt.mask.assign(rt.h_kv * rt.n_q * rt.words, 0u);
  rt.active.assign(rt.h_kv * rt.n_q, 0);
  rt.ties.clear();
  for (int64_t i = 0; i < rt.n_q; ++i) {
    const int64_t ci = rt.diagonal[i];
    for (int64_t h = 0; h < rt.h_q && ci > 0; ++h) {
      const int64_t r = h / g;
      const std::vector<double> x(rt.x.begin() + (i * rt.h_q + h) * nc, rt.x.begin() + (i * rt.h_q + h) * nc + ci);
      const double tau = entmax_threshold_sorted(x, m.alpha);
      rt.tau[i * rt.h_q + h] = tau;
      const std::vector<double> w_head = entmax_weights(x, tau, m.alpha);
      for (int64_t c = 0; c < ci; ++c) {
        rt.weight[(i * rt.h_kv + r) * nc + c] += w_head[c] / double(g);
        if (is_entmax_tie(x[c], tau)) rt.ties.push_back(Tie{i, h, c, std::fabs(x[c] - tau)});
      }
    }
    for (int64_t r = 0; r < rt.h_kv; ++r) {
      uint32_t* row = &rt.mask[(r * rt.n_q + i) * rt.words];
      int64_t routed = 0;
      double sum_log_w = 0.0;
      for (int64_t c = 0; c < ci; ++c) {
        const double w = rt.w(i, r, c);
        if (w > 0.0) {
          row[c / 32] |= 1u << (c % 32);
          ++routed;
          sum_log_w += std::log(w);
        }
      }
      row[ci / 32] |= 1u << (ci % 32);
      rt.mu[i * rt.h_kv + r] = routed > 0 ? sum_log_w / double(routed) : 0.0;
      rt.active[r * rt.n_q + i] = static_cast<int32_t>(routed + 1);
    }
  }
}

// Stage 1 of the contract; with float_order the scores are accumulated in float as a float kernel does.
Routing route_impl(const Sequence& s, const std::vector<double>& summaries, const Method& m, int64_t mask_words,
                   const FloatSum* float_order) {
  if (!(m.alpha > 1.0)) throw std::invalid_argument("alpha must be > 1");
  const int64_t C = m.chunk, d = s.d, g = s.group();
  Routing rt;
  rt.n_q = s.n_q;
  rt.h_q = s.h_q;
  rt.h_kv = s.h_kv;
  rt.num_complete = s.n_k / C;
  const int64_t total_chunks = (s.n_k + C - 1) / C;
  rt.words = mask_words > 0 ? mask_words : (total_chunks + 31) / 32;
  if (rt.words * 32 < total_chunks) throw std::invalid_argument("mask_words too small for the sequence");
  if (static_cast<int64_t>(summaries.size()) < rt.num_complete * s.h_kv * d)
    throw std::invalid_argument("fewer summaries than complete chunks");

  const int64_t nc = rt.num_complete;
  rt.diagonal.resize(s.n_q);
  rt.x.assign(s.n_q * s.h_q * nc, 0.0);
  rt.x_abs.assign(s.n_q * s.h_q * nc, 0.0);

  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  const double x_factor = (m.alpha - 1.0) * m.gamma * inv_sqrt_d;  // x = (α−1)·γ·⟨q, k̄⟩/sqrt(d)
  for (int64_t i = 0; i < s.n_q; ++i) {
    const int64_t p = s.n_k - s.n_q + i;  // bottom-right causal position
    const int64_t ci = p / C;             // diagonal chunk; routable chunks are [0, ci)
    rt.diagonal[i] = ci;
    for (int64_t h = 0; h < s.h_q; ++h) {
      const int64_t r = h / g;
      for (int64_t c = 0; c < ci; ++c) {
        const double* kbar = &summaries[(c * s.h_kv + r) * d];
        double abs_sum = 0.0;
        for (int64_t e = 0; e < d; ++e) abs_sum += std::fabs(s.q_row(i, h)[e] * kbar[e]);
        rt.x[(i * s.h_q + h) * nc + c] =
            float_order ? float_x_of(s.q_row(i, h), kbar, d, m, *float_order) : x_factor * dot(s.q_row(i, h), kbar, d);
        rt.x_abs[(i * s.h_q + h) * nc + c] = std::fabs(x_factor) * abs_sum;
      }
    }
  }
  settle(rt, m);
  return rt;
}

}  // namespace

Routing route(const Sequence& s, const std::vector<double>& summaries, const Method& m, int64_t mask_words) {
  return route_impl(s, summaries, m, mask_words, nullptr);
}

Routing route_same_precision(const Sequence& s, const std::vector<double>& summaries, const Method& m,
                             int64_t mask_words, FloatSum order) {
  return route_impl(s, summaries, m, mask_words, &order);
}

Routing reroute(const Routing& rt, const std::vector<double>& x, const Method& m) {
  if (x.size() != rt.x.size()) throw std::invalid_argument("reroute: x has the wrong size");
  Routing out = rt;
  out.x = x;
  settle(out, m);
  return out;
}

double prior_bias_of(const Routing& rt, const Method& m, int64_t i, int64_t r, int64_t c) {
  if (c == rt.diagonal[i]) return 0.0;  // the diagonal branch D_i carries no bias
  const double log_w = std::log(rt.w(i, r, c));
  switch (m.prior) {
    case PriorMode::kEstimateDiagonal: return (log_w - rt.mu[i * rt.h_kv + r]) / m.sigma;
    case PriorMode::kRaw: return log_w;
    case PriorMode::kNone: return 0.0;
  }
  return 0.0;
}

Result forward(const Sequence& s, const Method& m, int64_t mask_words) {
  Result res;
  res.summaries = summarize(s, m);
  res.routing = route(s, res.summaries, m, mask_words);
  res.attention = attend(s, res.routing, m);
  return res;
}

}  // namespace dashattn::ref
