// Runs a tiny forward through the installed library on the CPU backend and checks the output is finite.
#include <dashattn/dashattn.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using namespace dashattn;
  const int64_t n = 130, h_q = 4, h_kv = 2, d = 64;
  std::vector<float> q(n * h_q * d), k(n * h_kv * d), v(n * h_kv * d), o(n * h_q * d);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11f * i);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.05f * i + 1.0f);
  ForwardParams p;
  p.q = make_view(q.data(), DType::kF32, {1, n, h_q, d});
  p.k = make_view(k.data(), DType::kF32, {1, n, h_kv, d});
  p.v = make_view(v.data(), DType::kF32, {1, n, h_kv, d});
  p.o = make_view(o.data(), DType::kF32, {1, n, h_q, d});
  p.method.chunk_size = 32;
  Backend& backend = Registry::instance().select("cpu");
  forward(backend, p);
  for (float x : o) {
    if (!std::isfinite(x)) {
      std::printf("consumer: non-finite output\n");
      return 1;
    }
  }
  std::printf("consumer: libdashattn %s (%s) ran a forward on '%s'\n", DASHATTN_VERSION_STRING,
              DASHATTN_COMPILED_BACKENDS, backend.name());
  return 0;
}
