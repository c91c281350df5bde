// Stage 2 of the float64 reference in its two forms (attention bias and the paper's KL prior g_σ), dense causal
// attention, and the same-precision naive versions that set the tolerance of a backend.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "reference/reference.h"

namespace dashattn::ref {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A key of S_i with the bias of the bias form.
struct KeyBias {
  int64_t j;
  double bias;
};

// S_i = routed chunks ∪ D_i for query i and KV head r, in key order.
std::vector<KeyBias> attended_keys(const Sequence& s, const Routing& rt, const Method& m, int64_t i, int64_t r) {
  const int64_t C = m.chunk, p = s.n_k - s.n_q + i, ci = rt.diagonal[i];
  std::vector<KeyBias> keys;
  for (int64_t c = 0; c < ci; ++c) {
    if (!rt.routed(i, r, c)) continue;
    const double bias = prior_bias_of(rt, m, i, r, c);
    for (int64_t j = c * C; j < (c + 1) * C; ++j) keys.push_back({j, bias});
  }
  for (int64_t j = ci * C; j <= p; ++j) keys.push_back({j, 0.0});
  return keys;
}

double dot(const double* a, const double* b, int64_t d) {
  double acc = 0.0;
  for (int64_t e = 0; e < d; ++e) acc += a[e] * b[e];
  return acc;
}

Attention empty_attention(const Sequence& s) {
  Attention a;
  a.n_q = s.n_q;
  a.h_q = s.h_q;
  a.d = s.d;
  a.o.assign(s.n_q * s.h_q * s.d, 0.0);
  a.lse.assign(s.n_q * s.h_q, kNegInf);
  return a;
}

// softmax(logit)·V over the listed keys, in double; writes o and lse of (i, h).
void softmax_rows(const Sequence& s, int64_t i, int64_t h, const std::vector<int64_t>& keys,
                  const std::vector<double>& logit, Attention& a) {
  const int64_t r = h / s.group(), d = s.d;
  double max_logit = kNegInf;
  for (double l : logit) max_logit = std::max(max_logit, l);
  double norm = 0.0;
  for (double l : logit) norm += std::exp(l - max_logit);
  double* o = &a.o[(i * s.h_q + h) * d];
  for (size_t t = 0; t < keys.size(); ++t) {
    const double p = std::exp(logit[t] - max_logit) / norm;
    const double* v = s.v_row(keys[t], r);
    for (int64_t e = 0; e < d; ++e) o[e] += p * v[e];
  }
  a.lse[i * s.h_q + h] = max_logit + std::log(norm);
}

// The same in float, the way a plain low-precision kernel computes it.
void softmax_rows_float(const Sequence& s, int64_t i, int64_t h, const std::vector<int64_t>& keys,
                        const std::vector<double>& bias, float scale, DType in_dtype, DType out_dtype,
                        Attention& a) {
  const int64_t r = h / s.group(), d = s.d;
  auto in = [&](double x) { return round_to_dtype(static_cast<float>(x), in_dtype); };
  std::vector<float> logit(keys.size());
  float max_logit = -std::numeric_limits<float>::infinity();
  for (size_t t = 0; t < keys.size(); ++t) {
    const double* q = s.q_row(i, h);
    const double* k = s.k_row(keys[t], r);
    float acc = 0.0f;
    for (int64_t e = 0; e < d; ++e) acc += in(q[e]) * in(k[e]);
    logit[t] = acc * scale + static_cast<float>(bias[t]);
    max_logit = std::max(max_logit, logit[t]);
  }
  float norm = 0.0f;
  std::vector<float> acc(d, 0.0f);
  for (size_t t = 0; t < keys.size(); ++t) {
    const float p = std::exp(logit[t] - max_logit);
    norm += p;
    const float p_rounded = round_to_dtype(p, in_dtype);  // P enters P·V in the input dtype
    const double* v = s.v_row(keys[t], r);
    for (int64_t e = 0; e < d; ++e) acc[e] += p_rounded * in(v[e]);
  }
  double* o = &a.o[(i * s.h_q + h) * d];
  for (int64_t e = 0; e < d; ++e) o[e] = round_to_dtype(acc[e] / norm, out_dtype);
  a.lse[i * s.h_q + h] = max_logit + std::log(norm);
}

}  // namespace

Attention attend(const Sequence& s, const Routing& rt, const Method& m) {
  Attention a = empty_attention(s);
  const double scale = m.resolved_scale(s.d);
  for (int64_t i = 0; i < s.n_q; ++i) {
    for (int64_t h = 0; h < s.h_q; ++h) {
      const int64_t r = h / s.group();
      std::vector<int64_t> keys;
      std::vector<double> logit;
      for (const KeyBias& kb : attended_keys(s, rt, m, i, r)) {
        keys.push_back(kb.j);
        logit.push_back(scale * dot(s.q_row(i, h), s.k_row(kb.j, r), s.d) + kb.bias);
      }
      softmax_rows(s, i, h, keys, logit, a);
    }
  }
  return a;
}

Attention attend_kl_prior(const Sequence& s, const Routing& rt, const Method& m) {
  if (m.prior != PriorMode::kEstimateDiagonal)
    throw std::invalid_argument("the KL-prior form is the estimate_diagonal mode");
  Attention a = empty_attention(s);
  const double scale = m.resolved_scale(s.d);
  const int64_t C = m.chunk;
  for (int64_t i = 0; i < s.n_q; ++i) {
    const int64_t p = s.n_k - s.n_q + i, ci = rt.diagonal[i];
    const double D = double(p - ci * C + 1);  // |D_i|: visible keys of the diagonal chunk
    for (int64_t h = 0; h < s.h_q; ++h) {
      const int64_t r = h / s.group();
      // Routed chunks and the normalizer of w'_j = w_{c(j)}^{1/σ} / (C · Σ_c w_c^{1/σ}).
      std::vector<int64_t> routed;
      double sum_w_pow = 0.0;
      for (int64_t c = 0; c < ci; ++c) {
        if (!rt.routed(i, r, c)) continue;
        routed.push_back(c);
        sum_w_pow += std::exp(std::log(rt.w(i, r, c)) / m.sigma);
      }
      const double R = double(routed.size() * C);  // |R_i| in tokens
      auto log_w_prime = [&](int64_t c) { return std::log(rt.w(i, r, c)) / m.sigma - std::log(C * sum_w_pow); };

      // λ_i = sigmoid(KL(u_R ‖ w'_R) + log |R|/|D|); with nothing routed the whole prior sits on D_i.
      double log_lambda = kNegInf, log_one_minus_lambda = 0.0;
      if (!routed.empty()) {
        double kl = 0.0;  // Σ_{j ∈ R} (1/|R|) log((1/|R|) / w'_j), C tokens per routed chunk
        for (int64_t c : routed) kl += double(C) / R * (std::log(1.0 / R) - log_w_prime(c));
        const double a_arg = kl + std::log(R / D);
        log_lambda = -std::log1p(std::exp(-a_arg));        // log sigmoid(a)
        log_one_minus_lambda = -std::log1p(std::exp(a_arg));  // log sigmoid(−a) = log(1 − λ)
      }

      // p_route_j ∝ g_j·exp(z_j): logits log g_j + z_j.
      std::vector<int64_t> keys;
      std::vector<double> logit;
      for (int64_t c : routed) {
        const double log_g = log_lambda + log_w_prime(c);
        for (int64_t j = c * C; j < (c + 1) * C; ++j) {
          keys.push_back(j);
          logit.push_back(log_g + scale * dot(s.q_row(i, h), s.k_row(j, r), s.d));
        }
      }
      const double log_g_diag = log_one_minus_lambda - std::log(D);
      for (int64_t j = ci * C; j <= p; ++j) {
        keys.push_back(j);
        logit.push_back(log_g_diag + scale * dot(s.q_row(i, h), s.k_row(j, r), s.d));
      }
      softmax_rows(s, i, h, keys, logit, a);  // its lse is log Σ g·exp(z), the KL form's own normalizer
    }
  }
  return a;
}

Attention dense_causal(const Sequence& s, double scale) {
  Attention a = empty_attention(s);
  for (int64_t i = 0; i < s.n_q; ++i) {
    const int64_t p = s.n_k - s.n_q + i;
    for (int64_t h = 0; h < s.h_q; ++h) {
      const int64_t r = h / s.group();
      std::vector<int64_t> keys;
      std::vector<double> logit;
      for (int64_t j = 0; j <= p; ++j) {
        keys.push_back(j);
        logit.push_back(scale * dot(s.q_row(i, h), s.k_row(j, r), s.d));
      }
      softmax_rows(s, i, h, keys, logit, a);
    }
  }
  return a;
}

Allowance bias_allowance(const Sequence& s, const Routing& rt, const Method& m, const BiasBudget& budget) {
  Allowance a;
  a.o.assign(s.n_q * s.h_q * s.d, 0.0);
  a.lse.assign(s.n_q * s.h_q, 0.0);
  const double scale = m.resolved_scale(s.d);
  const int64_t d = s.d;
  for (int64_t i = 0; i < s.n_q; ++i) {
    for (int64_t h = 0; h < s.h_q; ++h) {
      const int64_t r = h / s.group();
      if (budget.delta(i, r) == 0.0) continue;
      const std::vector<KeyBias> keys = attended_keys(s, rt, m, i, r);
      // The float64 softmax of the row and each key's interval of e^{d'−d}.
      std::vector<double> prob(keys.size()), ratio_lo(keys.size(), 1.0), ratio_hi(keys.size(), 1.0);
      double max_logit = kNegInf;
      for (size_t t = 0; t < keys.size(); ++t) {
        prob[t] = scale * dot(s.q_row(i, h), s.k_row(keys[t].j, r), d) + keys[t].bias;
        max_logit = std::max(max_logit, prob[t]);
        const int64_t c = keys[t].j / m.chunk;
        if (c < rt.diagonal[i]) {
          ratio_lo[t] = std::exp(budget.lo[budget.at(i, r, c)]);
          ratio_hi[t] = std::exp(budget.hi[budget.at(i, r, c)]);
        }
      }
      double norm = 0.0;
      for (double& l : prob) norm += (l = std::exp(l - max_logit));
      double sum_lo = 0.0, sum_hi = 0.0;  // bounds of Σ p·e^{d'−d}, the factor the normalizer moves by
      for (size_t t = 0; t < keys.size(); ++t) {
        prob[t] /= norm;
        sum_lo += prob[t] * ratio_lo[t];
        sum_hi += prob[t] * ratio_hi[t];
      }
      a.lse[i * s.h_q + h] = std::max(std::log(sum_hi), -std::log(sum_lo));
      // p'_j / p_j = e^{d'_j−d_j} / Σ p·e^{d'−d} lies in [ratio_lo/sum_hi, ratio_hi/sum_lo].
      double* o = &a.o[(i * s.h_q + h) * d];
      for (size_t t = 0; t < keys.size(); ++t) {
        const double moved = prob[t] * std::max(ratio_hi[t] / sum_lo - 1.0, 1.0 - ratio_lo[t] / sum_hi);
        if (moved == 0.0) continue;
        const double* v = s.v_row(keys[t].j, r);
        for (int64_t e = 0; e < d; ++e) o[e] += moved * std::fabs(v[e]);
      }
    }
  }
  return a;
}

Attention attend_same_precision(const Sequence& s, const Routing& rt, const Routing& bias_rt, const Method& m,
                                DType in_dtype, DType out_dtype) {
  Attention a = empty_attention(s);
  const float scale = static_cast<float>(m.resolved_scale(s.d));
  for (int64_t i = 0; i < s.n_q; ++i) {
    for (int64_t h = 0; h < s.h_q; ++h) {
      const int64_t r = h / s.group();
      std::vector<int64_t> keys;
      std::vector<double> bias;
      for (const KeyBias& kb : attended_keys(s, rt, m, i, r)) {
        keys.push_back(kb.j);
        const int64_t c = kb.j / m.chunk;
        // A chunk the float routing dropped (a near tie) keeps the exact bias: it has no float weight to take.
        const bool float_weight = c < rt.diagonal[i] && bias_rt.routed(i, r, c);
        bias.push_back(float_weight ? static_cast<float>(prior_bias_of(bias_rt, m, i, r, c)) : kb.bias);
      }
      softmax_rows_float(s, i, h, keys, bias, scale, in_dtype, out_dtype, a);
    }
  }
  return a;
}

Attention attend_same_precision(const Sequence& s, const Routing& rt, const Method& m, DType in_dtype,
                                DType out_dtype) {
  return attend_same_precision(s, rt, rt, m, in_dtype, out_dtype);
}

Attention dense_causal_same_precision(const Sequence& s, double scale, DType in_dtype, DType out_dtype) {
  Attention a = empty_attention(s);
  for (int64_t i = 0; i < s.n_q; ++i) {
    const int64_t p = s.n_k - s.n_q + i;
    std::vector<int64_t> keys;
    for (int64_t j = 0; j <= p; ++j) keys.push_back(j);
    const std::vector<double> bias(keys.size(), 0.0);
    for (int64_t h = 0; h < s.h_q; ++h)
      softmax_rows_float(s, i, h, keys, bias, static_cast<float>(scale), in_dtype, out_dtype, a);
  }
  return a;
}

}  // namespace dashattn::ref
