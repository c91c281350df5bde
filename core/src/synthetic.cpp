#include "dashattn/synthetic.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "dashattn/error.h"

namespace dashattn::synthetic {
namespace {

// Normal deviates from our own Box-Muller transform: std::normal_distribution differs between standard libraries,
// and a seed must give the same problem everywhere.
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : engine_(seed) {}

  float operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform();
    while (u1 <= 0.0) u1 = uniform();
    const double u2 = uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586 * u2;
    spare_ = static_cast<float>(radius * std::sin(angle));
    has_spare_ = true;
    return static_cast<float>(radius * std::cos(angle));
  }

  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // Uniform integer in [lo, hi], by rejection so every value is equally likely.
  int64_t integer(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t r = engine_();
    while (r >= limit) r = engine_();
    return lo + static_cast<int64_t>(r % span);
  }

 private:
  std::mt19937_64 engine_;
  float spare_ = 0.0f;
  bool has_spare_ = false;
};

void require_positive(const char* name, int64_t value) {
  if (value <= 0) throw InvalidArgument(name, "a positive value", std::to_string(value));
}

void check(const Config& c) {
  require_positive("batch", c.batch);
  require_positive("n", c.n);
  require_positive("h_q", c.h_q);
  require_positive("h_kv", c.h_kv);
  require_positive("d", c.d);
  require_positive("chunk", c.chunk);
  require_positive("clusters_per_chunk", c.clusters_per_chunk);
  if (c.h_q % c.h_kv != 0) {
    throw InvalidArgument("h_q", "a multiple of h_kv = " + std::to_string(c.h_kv), std::to_string(c.h_q));
  }
  if (!(c.needle_key_share > 0.0f)) {
    throw InvalidArgument("needle_key_share", "a value > 0", std::to_string(c.needle_key_share));
  }
  if (c.num_needles > c.d) {
    throw InvalidArgument("num_needles", "at most d = " + std::to_string(c.d) + " (one direction each)",
                          std::to_string(c.num_needles));
  }
  if (c.num_needles < 0) throw InvalidArgument("num_needles", "a value >= 0", std::to_string(c.num_needles));
  if (c.num_needles > 0) {
    require_positive("needle_queries", c.needle_queries);
    // A needle chunk c needs its whole query window at positions >= (c + 1) * chunk, where c is routable.
    const int64_t placeable = (c.n - c.needle_queries) / c.chunk;
    if (placeable < c.num_needles) {
      throw InvalidArgument("num_needles",
                            "at most " + std::to_string(std::max<int64_t>(placeable, 0)) + " needles for n = " +
                                std::to_string(c.n) + ", chunk = " + std::to_string(c.chunk) +
                                " and windows of " + std::to_string(c.needle_queries) + " queries",
                            std::to_string(c.num_needles));
    }
  }
}

// Distinct needle chunks of one sequence, in increasing order.
std::vector<int64_t> pick_needle_chunks(const Config& c, Gaussian& rng) {
  const int64_t placeable = (c.n - c.needle_queries) / c.chunk;
  std::vector<int64_t> chunks;
  while (static_cast<int>(chunks.size()) < c.num_needles) {
    const int64_t candidate = rng.integer(0, placeable - 1);
    if (std::find(chunks.begin(), chunks.end(), candidate) == chunks.end()) chunks.push_back(candidate);
  }
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

// count random orthonormal vectors of dimension d (Gram-Schmidt in double on Gaussian draws); at most d of them.
std::vector<std::vector<float>> orthonormal_directions(size_t count, int64_t d, Gaussian& rng) {
  std::vector<std::vector<double>> basis;
  while (basis.size() < std::min(count, static_cast<size_t>(d))) {
    std::vector<double> u(static_cast<size_t>(d));
    for (double& x : u) x = rng();
    for (const std::vector<double>& b : basis) {
      double dot = 0;
      for (size_t e = 0; e < u.size(); ++e) dot += u[e] * b[e];
      for (size_t e = 0; e < u.size(); ++e) u[e] -= dot * b[e];
    }
    double norm2 = 0;
    for (double x : u) norm2 += x * x;
    if (norm2 < 1e-6) continue;  // numerically dependent draw: try again
    const double inv = 1.0 / std::sqrt(norm2);
    for (double& x : u) x *= inv;
    basis.push_back(std::move(u));
  }
  std::vector<std::vector<float>> out;
  for (const std::vector<double>& b : basis) out.emplace_back(b.begin(), b.end());
  return out;
}

}  // namespace

TensorView Problem::q_view() {
  return make_view(q.data(), DType::kF32, {config.batch, config.n, config.h_q, config.d});
}
TensorView Problem::k_view() {
  return make_view(k.data(), DType::kF32, {config.batch, config.n, config.h_kv, config.d});
}
TensorView Problem::v_view() {
  return make_view(v.data(), DType::kF32, {config.batch, config.n, config.h_kv, config.d});
}
TensorView Problem::summary_query_view() {
  return make_view(summary_query.data(), DType::kF32, {config.h_kv, config.d});
}

Problem generate(const Config& config) {
  check(config);
  const Config& c = config;
  Problem p;
  p.config = c;
  Gaussian rng(c.seed);

  const int64_t b = c.batch, n = c.n, hq = c.h_q, hkv = c.h_kv, d = c.d, g = c.h_q / c.h_kv;
  p.q.resize(static_cast<size_t>(b * n * hq * d));
  p.k.resize(static_cast<size_t>(b * n * hkv * d));
  p.v.resize(static_cast<size_t>(b * n * hkv * d));
  p.summary_query.resize(static_cast<size_t>(hkv * d));

  for (float& x : p.summary_query) x = c.summary_query_scale * rng();
  for (float& x : p.q) x = c.query_scale * rng();
  for (float& x : p.v) x = rng();

  // Clustered keys: the chunk grid is per sequence, each (chunk, head) has its own centres.
  const int64_t num_chunks = (n + c.chunk - 1) / c.chunk;
  std::vector<float> centres(static_cast<size_t>(c.clusters_per_chunk * d));
  for (int64_t s = 0; s < b; ++s) {
    for (int64_t ch = 0; ch < num_chunks; ++ch) {
      for (int64_t r = 0; r < hkv; ++r) {
        for (int64_t e = 0; e < d; ++e) {
          const float chunk_centre = c.centre_scale * rng();
          for (int m = 0; m < c.clusters_per_chunk; ++m) {
            centres[static_cast<size_t>(m * d + e)] = chunk_centre + c.cluster_spread * rng();
          }
        }
        const int64_t end = std::min(n, (ch + 1) * c.chunk);
        for (int64_t j = ch * c.chunk; j < end; ++j) {
          const int64_t m = rng.integer(0, c.clusters_per_chunk - 1);
          float* key = &p.k[static_cast<size_t>(((s * n + j) * hkv + r) * d)];
          for (int64_t e = 0; e < d; ++e) key[e] = centres[static_cast<size_t>(m * d + e)] + c.key_noise * rng();
        }
      }
    }
  }

  // Needles: one direction per (needle, KV head) on the chunk's keys and on its window's queries of every query
  // head of that KV head's group, so each contributes needle_boost to <q, k> / sqrt(d). The directions are made
  // orthonormal and projected out of every other key of the sequence first: the large query shift then changes
  // no other chunk's score, and only the planted chunk answers it.
  const float magnitude = std::sqrt(c.needle_boost * std::sqrt(static_cast<float>(d)));
  const float key_magnitude = magnitude * c.needle_key_share, query_magnitude = magnitude / c.needle_key_share;
  for (int64_t s = 0; s < b; ++s) {
    std::vector<Needle> planted;
    for (int64_t ch : pick_needle_chunks(c, rng)) {
      Needle nd;
      nd.batch_index = s;
      nd.chunk = ch;
      nd.query_begin = rng.integer((ch + 1) * c.chunk, n - c.needle_queries);
      nd.query_end = nd.query_begin + c.needle_queries;
      planted.push_back(nd);
    }
    for (int64_t r = 0; r < hkv; ++r) {
      const std::vector<std::vector<float>> dirs = orthonormal_directions(planted.size(), d, rng);
      for (int64_t j = 0; j < n; ++j) {
        float* key = &p.k[static_cast<size_t>(((s * n + j) * hkv + r) * d)];
        for (const std::vector<float>& u : dirs) {
          float dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += key[e] * u[static_cast<size_t>(e)];
          for (int64_t e = 0; e < d; ++e) key[e] -= dot * u[static_cast<size_t>(e)];
        }
      }
      for (size_t m = 0; m < planted.size(); ++m) {
        const Needle& nd = planted[m];
        const std::vector<float>& u = dirs[m];
        for (int64_t j = nd.chunk * c.chunk; j < (nd.chunk + 1) * c.chunk; ++j) {
          float* key = &p.k[static_cast<size_t>(((s * n + j) * hkv + r) * d)];
          for (int64_t e = 0; e < d; ++e) key[e] += key_magnitude * u[static_cast<size_t>(e)];
        }
        for (int64_t i = nd.query_begin; i < nd.query_end; ++i) {
          for (int64_t h = r * g; h < (r + 1) * g; ++h) {
            float* query = &p.q[static_cast<size_t>(((s * n + i) * hq + h) * d)];
            for (int64_t e = 0; e < d; ++e) query[e] += query_magnitude * u[static_cast<size_t>(e)];
          }
        }
      }
    }
    p.needles.insert(p.needles.end(), planted.begin(), planted.end());
  }
  return p;
}

std::vector<uint8_t> convert(const std::vector<float>& values, DType dtype) {
  if (!(is_attention_dtype(dtype) || dtype == DType::kF64)) {
    throw InvalidArgument("dtype", "f32, f16, bf16 or f64", dtype_name(dtype));
  }
  const size_t width = static_cast<size_t>(dtype_size(dtype));
  std::vector<uint8_t> out(values.size() * width);
  for (size_t i = 0; i < values.size(); ++i) store_from_float(out.data() + i * width, dtype, values[i]);
  return out;
}

}  // namespace dashattn::synthetic
