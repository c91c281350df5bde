#include "verify_reference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "dashattn/dtype.h"

namespace dashattn::cli::reference {
namespace {

constexpr double kFloatEps = 0x1.0p-24;  // unit roundoff of float32

size_t idx4(int64_t a, int64_t b, int64_t c, int64_t d, int64_t B, int64_t C, int64_t D) {
  return static_cast<size_t>(((a * B + b) * C + c) * D + d);
}

double round_like(double v, DType t) {
  return t == DType::kF64 ? v : static_cast<double>(round_to_dtype(static_cast<float>(v), t));
}

}  // namespace

double Problem::scale() const { return method.scale > 0 ? method.scale : 1.0 / std::sqrt(static_cast<double>(d)); }

std::vector<double> summaries(const Problem& p) {
  const int64_t C = p.chunk(), nc = p.complete_chunks(), d = p.d;
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(static_cast<size_t>(p.batch * nc * p.h_kv * d), 0.0);
  std::vector<double> logits(static_cast<size_t>(C));
  for (int64_t s = 0; s < p.batch; ++s) {
    for (int64_t c = 0; c < nc; ++c) {
      for (int64_t r = 0; r < p.h_kv; ++r) {
        const double* sq = &p.summary_query[static_cast<size_t>(r * d)];
        double m = -INFINITY;
        for (int64_t t = 0; t < C; ++t) {
          const double* key = &p.k[idx4(s, c * C + t, r, 0, p.n_k, p.h_kv, d)];
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += sq[e] * key[e];
          logits[static_cast<size_t>(t)] = dot * inv_sqrt_d;
          m = std::max(m, logits[static_cast<size_t>(t)]);
        }
        double denom = 0;
        for (double& l : logits) denom += (l = std::exp(l - m));
        double* dst = &out[idx4(s, c, r, 0, nc, p.h_kv, d)];
        for (int64_t t = 0; t < C; ++t) {
          const double w = logits[static_cast<size_t>(t)] / denom;
          const double* key = &p.k[idx4(s, c * C + t, r, 0, p.n_k, p.h_kv, d)];
          for (int64_t e = 0; e < d; ++e) dst[e] += w * key[e];
        }
        for (int64_t e = 0; e < d; ++e) dst[e] = round_like(dst[e], p.dtype);
      }
    }
  }
  return out;
}

double entmax_threshold_sorted(std::vector<double> x, double alpha) {
  const size_t n = x.size();
  std::sort(x.begin(), x.end(), std::greater<double>());
  const double top = x[0];
  for (double& v : x) v -= top;  // shift so the largest is 0: keeps the sums well conditioned
  if (alpha == 1.5 || alpha == 2.0) {
    // Support of size k: the k largest, with the threshold from the closed form over them; it is the one whose
    // threshold falls between the k-th and (k+1)-th largest values.
    double s1 = 0, s2 = 0;
    for (size_t k = 1; k <= n; ++k) {
      s1 += x[k - 1];
      s2 += x[k - 1] * x[k - 1];
      const double kk = static_cast<double>(k);
      double tau;
      if (alpha == 2.0) {
        tau = (s1 - 1.0) / kk;
      } else {
        const double disc = s1 * s1 - kk * (s2 - 1.0);
        if (disc < 0) continue;
        tau = (s1 - std::sqrt(disc)) / kk;
      }
      const bool inside = x[k - 1] > tau;
      const bool next_outside = k == n || x[k] <= tau;
      if (inside && next_outside) return tau + top;
    }
  }
  // Other alpha (and a numerically degenerate sort): bisection on the decreasing weight sum, in double.
  const double p = 1.0 / (alpha - 1.0);
  double lo = -1.0, hi = 0.0;
  for (int it = 0; it < 200 && hi - lo > 1e-300; ++it) {
    const double mid = 0.5 * (lo + hi);
    double sum = 0;
    for (double v : x) sum += v > mid ? std::pow(v - mid, p) : 0.0;
    (sum >= 1.0 ? lo : hi) = mid;
    if (mid == lo && mid == hi) break;
  }
  return 0.5 * (lo + hi) + top;
}

template <typename Real>
Routing route(const Problem& p, const std::vector<double>& summ) {
  const int64_t C = p.chunk(), nc = p.complete_chunks(), d = p.d, g = p.h_q / p.h_kv;
  const double alpha = p.method.alpha, inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
  const double power = 1.0 / (alpha - 1.0);
  Routing r;
  r.words = (((p.n_k + C - 1) / C) + 31) / 32;
  r.mask.assign(static_cast<size_t>(p.batch * p.h_kv * p.n_q * r.words), 0u);
  r.log_w.assign(static_cast<size_t>(p.batch * p.h_kv * p.n_q * nc), -INFINITY);
  r.mu.assign(static_cast<size_t>(p.batch * p.h_kv * p.n_q), 0.0);
  r.tie.assign(r.log_w.size(), 0);
  r.bias_sensitivity.assign(r.mu.size(), 0.0);

  std::vector<double> x(static_cast<size_t>(g * nc)), err(static_cast<size_t>(g * nc)), tau(static_cast<size_t>(g));
  for (int64_t s = 0; s < p.batch; ++s) {
    for (int64_t i = 0; i < p.n_q; ++i) {
      const int64_t pos = p.n_k - p.n_q + i;
      const int64_t diag = pos / C;  // routable chunks: [0, diag)
      for (int64_t kv = 0; kv < p.h_kv; ++kv) {
        const size_t row = static_cast<size_t>((s * p.h_kv + kv) * p.n_q + i);
        uint32_t* mask = &r.mask[row * static_cast<size_t>(r.words)];
        mask[diag / 32] |= 1u << (diag % 32);
        if (diag == 0) continue;
        double row_err = 0;
        for (int64_t hh = 0; hh < g; ++hh) {
          const double* q = &p.q[idx4(s, i, kv * g + hh, 0, p.n_q, p.h_q, d)];
          for (int64_t c = 0; c < diag; ++c) {
            const double* sm = &summ[idx4(s, c, kv, 0, nc, p.h_kv, d)];
            Real dot = 0;
            double dot_abs = 0;
            for (int64_t e = 0; e < d; ++e) {
              dot += static_cast<Real>(q[e]) * static_cast<Real>(sm[e]);
              dot_abs += std::fabs(q[e] * sm[e]);
            }
            const double factor = (alpha - 1.0) * p.method.gamma * inv_sqrt_d;
            x[static_cast<size_t>(hh * nc + c)] = static_cast<double>(static_cast<Real>(factor) * dot);
            // Worst-case float32 error of a length-d dot product and its scaling.
            const double e_bound = std::fabs(factor) * dot_abs * static_cast<double>(d + 3) * kFloatEps;
            err[static_cast<size_t>(hh * nc + c)] = e_bound;
            row_err = std::max(row_err, e_bound);
          }
          tau[static_cast<size_t>(hh)] = entmax_threshold_sorted(
              std::vector<double>(x.begin() + hh * nc, x.begin() + hh * nc + diag), alpha);
        }
        double log_sum = 0, max_dlog_w = 0;
        int64_t routed = 0;
        for (int64_t c = 0; c < diag; ++c) {
          Real w = 0;
          double dw = 0;  // first-order bound of the change of w under the score errors
          bool clearly_in = false, near = false;
          for (int64_t hh = 0; hh < g; ++hh) {
            const double t = tau[static_cast<size_t>(hh)];
            const double y = x[static_cast<size_t>(hh * nc + c)] - t;
            // The threshold moves by at most the largest score error of the row; the score by its own.
            const double dy = err[static_cast<size_t>(hh * nc + c)] + row_err;
            if (y > 0) {
              w += std::pow(static_cast<Real>(y), static_cast<Real>(power));
              dw += power * std::pow(y, power - 1.0) * dy;
            }
            const double margin = 1e-6 * std::max(1.0, std::fabs(t)) + dy;
            if (y > margin) clearly_in = true;
            if (std::fabs(y) <= margin) near = true;
          }
          w /= static_cast<Real>(g);
          dw /= static_cast<double>(g);
          // A positive float weight is at least ~1e-45, so |log w| stays below 104: cap the bound there.
          if (w > 0) max_dlog_w = std::min(110.0, std::max(max_dlog_w, dw >= w ? INFINITY : -std::log1p(-dw / w)));
          const size_t cell = row * static_cast<size_t>(nc) + static_cast<size_t>(c);
          r.tie[cell] = (!clearly_in && near) ? 1 : 0;
          if (w > 0) {
            mask[c / 32] |= 1u << (c % 32);
            r.log_w[cell] = static_cast<double>(std::log(w));
            log_sum += r.log_w[cell];
            ++routed;
          }
        }
        r.mu[row] = routed > 0 ? log_sum / static_cast<double>(routed) : 0.0;
        // d = log w (raw) moves by the change of log w; (log w - mu) / sigma by up to twice that, over sigma.
        switch (p.method.prior) {
          case PriorMode::kRaw: r.bias_sensitivity[row] = max_dlog_w; break;
          case PriorMode::kEstimateDiagonal:
            r.bias_sensitivity[row] = 2.0 * max_dlog_w / static_cast<double>(p.method.sigma);
            break;
          case PriorMode::kNone: r.bias_sensitivity[row] = 0.0; break;
        }
      }
    }
  }
  return r;
}

template Routing route<double>(const Problem&, const std::vector<double>&);
template Routing route<float>(const Problem&, const std::vector<double>&);

Routing with_weights_of(const Routing& exact, const Routing& approx, int64_t nc) {
  Routing r = exact;
  const size_t rows = r.mu.size();
  for (size_t row = 0; row < rows; ++row) {
    double sum = 0;
    int64_t routed = 0;
    for (size_t c = 0; c < static_cast<size_t>(nc); ++c) {
      double& lw = r.log_w[row * static_cast<size_t>(nc) + c];
      if (std::isinf(lw)) continue;
      const double other = approx.log_w[row * static_cast<size_t>(nc) + c];
      if (!std::isinf(other)) lw = other;
      sum += lw;
      ++routed;
    }
    r.mu[row] = routed > 0 ? sum / static_cast<double>(routed) : 0.0;
  }
  return r;
}

template <typename Real>
Attention attend(const Problem& p, const Routing& r) {
  const int64_t C = p.chunk(), nc = p.complete_chunks(), d = p.d, g = p.h_q / p.h_kv;
  const Real scale = static_cast<Real>(p.scale());
  const double inv_sigma = 1.0 / static_cast<double>(p.method.sigma);
  Attention a;
  a.o.assign(static_cast<size_t>(p.batch * p.n_q * p.h_q * d), 0.0);
  a.lse.assign(static_cast<size_t>(p.batch * p.h_q * p.n_q), 0.0);
  std::vector<int64_t> keys;
  std::vector<Real> bias, score, acc(static_cast<size_t>(d));
  for (int64_t s = 0; s < p.batch; ++s) {
    for (int64_t i = 0; i < p.n_q; ++i) {
      const int64_t pos = p.n_k - p.n_q + i;
      const int64_t diag = pos / C;
      for (int64_t kv = 0; kv < p.h_kv; ++kv) {
        const size_t row = static_cast<size_t>((s * p.h_kv + kv) * p.n_q + i);
        const uint32_t* mask = &r.mask[row * static_cast<size_t>(r.words)];
        // The attended keys S_i and their bias: routed chunks, then the diagonal branch (bias 0).
        keys.clear();
        bias.clear();
        for (int64_t c = 0; c < std::min(diag, nc); ++c) {
          if (!((mask[c / 32] >> (c % 32)) & 1u)) continue;
          const double lw = r.log_w[row * static_cast<size_t>(nc) + static_cast<size_t>(c)];
          double b = 0;
          switch (p.method.prior) {
            case PriorMode::kEstimateDiagonal: b = (lw - r.mu[row]) * inv_sigma; break;
            case PriorMode::kRaw: b = lw; break;
            case PriorMode::kNone: b = 0; break;
          }
          for (int64_t j = c * C; j < (c + 1) * C; ++j) {
            keys.push_back(j);
            bias.push_back(static_cast<Real>(b));
          }
        }
        for (int64_t j = diag * C; j <= pos; ++j) {
          keys.push_back(j);
          bias.push_back(Real(0));
        }
        for (int64_t hh = 0; hh < g; ++hh) {
          const int64_t h = kv * g + hh;
          const double* qd = &p.q[idx4(s, i, h, 0, p.n_q, p.h_q, d)];
          score.resize(keys.size());
          Real m = -std::numeric_limits<Real>::infinity();
          for (size_t t = 0; t < keys.size(); ++t) {
            const double* kd = &p.k[idx4(s, keys[t], kv, 0, p.n_k, p.h_kv, d)];
            Real dot = 0;
            for (int64_t e = 0; e < d; ++e) dot += static_cast<Real>(qd[e]) * static_cast<Real>(kd[e]);
            score[t] = scale * dot + bias[t];
            m = std::max(m, score[t]);
          }
          Real denom = 0;
          std::fill(acc.begin(), acc.end(), Real(0));
          for (size_t t = 0; t < keys.size(); ++t) {
            const Real w = std::exp(score[t] - m);
            denom += w;
            const double* vd = &p.v[idx4(s, keys[t], kv, 0, p.n_k, p.h_kv, d)];
            for (int64_t e = 0; e < d; ++e) acc[static_cast<size_t>(e)] += w * static_cast<Real>(vd[e]);
          }
          double* out = &a.o[idx4(s, i, h, 0, p.n_q, p.h_q, d)];
          for (int64_t e = 0; e < d; ++e) {
            const double v = static_cast<double>(acc[static_cast<size_t>(e)] / denom);
            out[e] = std::is_same<Real, double>::value ? v : round_like(v, p.dtype);
          }
          a.lse[static_cast<size_t>((s * p.h_q + h) * p.n_q + i)] =
              static_cast<double>(m) + std::log(static_cast<double>(denom));
        }
      }
    }
  }
  return a;
}

template Attention attend<double>(const Problem&, const Routing&);
template Attention attend<float>(const Problem&, const Routing&);

}  // namespace dashattn::cli::reference
