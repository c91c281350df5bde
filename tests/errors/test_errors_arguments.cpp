// Every invalid argument throws the right typed error naming the argument, before anything runs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "dashattn/dashattn.h"
#include "reference/checks.h"

using namespace dashattn;

namespace {

constexpr unsigned char kSentinel = 0x5a;

// A valid small forward on the CPU backend with every optional output, buffers pre-filled with a sentinel.
struct Fixture {
  ref::Problem pr;
  ref::HostTensor o, lse, mask, tau, mu, active, summaries;
  ForwardParams p;

  Fixture() {
    ref::ProblemSpec spec;
    spec.n_q = spec.n_k = 40;
    spec.h_q = 4;
    spec.h_kv = 2;
    spec.d = 64;
    spec.dtype = DType::kBF16;
    pr = ref::make_problem(spec);
    o = ref::make_host_tensor(DType::kBF16, {1, 40, 4, 64});
    lse = ref::make_host_tensor(DType::kF32, {1, 4, 40});
    mask = ref::make_host_tensor(DType::kU32, {1, 2, 40, 1});
    tau = ref::make_host_tensor(DType::kF32, {1, 4, 40});
    mu = ref::make_host_tensor(DType::kF32, {1, 2, 40});
    active = ref::make_host_tensor(DType::kI32, {1, 2, 40});
    summaries = ref::make_host_tensor(DType::kBF16, {1, 2, 2, 64});
    for (ref::HostTensor* t : {&o, &lse, &mask, &tau, &mu, &active, &summaries})
      std::memset(t->bytes.data(), kSentinel, t->bytes.size());
    p.q = pr.q.view;
    p.k = pr.k.view;
    p.v = pr.v.view;
    p.summary_query = pr.summary_query.view;
    p.summaries = summaries.view;
    p.o = o.view;
    p.lse = lse.view;
    p.routing.mask = mask.view;
    p.routing.tau = tau.view;
    p.routing.mu = mu.view;
    p.routing.active_chunks = active.view;
    p.method.chunk_size = 16;
  }

  // True when no output buffer was written.
  bool untouched() const {
    for (const ref::HostTensor* t : {&o, &lse, &mask, &tau, &mu, &active, &summaries})
      for (unsigned char c : t->bytes)
        if (c != kSentinel) return false;
    return true;
  }
};

// A backend that only records whether any stage was reached: validation must stop bad calls before that. Using
// it instead of a real backend keeps this suite meaningful in builds without the CPU backend.
class SpyBackend : public Backend {
 public:
  bool ran = false;
  const char* name() const override { return "spy"; }
  DeviceType device_type() const override { return DeviceType::kCpu; }
  int priority() const override { return 0; }
  Probe probe() const override { return {true, "host memory"}; }
  std::string unsupported_reason(const ForwardParams&) const override { return {}; }
  void summarize(const SummarizeParams&) override { ran = true; }
  void route(const RouteParams&) override { ran = true; }
  void attend(const AttendParams& p) override {
    ran = true;
    std::memset(p.o.data, 0, 2);  // a visible write, so "nothing written" is a meaningful check
  }
  void dense_attention(const DenseParams&) override { ran = true; }
  void* allocate(size_t bytes) override { return std::malloc(bytes > 0 ? bytes : 1); }
  void deallocate(void* ptr) noexcept override { std::free(ptr); }
  void copy(void* dst, const void* src, size_t bytes, CopyKind, void*) override { std::memcpy(dst, src, bytes); }
  void memset_zero(void* dst, size_t bytes, void*) override { std::memset(dst, 0, bytes); }
  void synchronize(void*) override {}
};

SpyBackend& cpu() {
  static SpyBackend spy;
  return spy;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Runs f, which must throw ErrorType with code `code` and an argument() starting with `argument`.
template <typename ErrorType>
void expect_error(const std::function<void()>& f, ErrorCode code, const std::string& argument) {
  try {
    f();
    FAIL("no error thrown; expected one about '" << argument << "'");
  } catch (const ErrorType& e) {
    INFO("message: " << std::string(e.what()));
    CHECK(e.code() == code);
    CHECK_MESSAGE(starts_with(e.argument(), argument), "argument() is '" << e.argument() << "'");
    CHECK(std::string(e.what()).find(argument) != std::string::npos);
  } catch (const std::exception& e) {
    FAIL("wrong exception type: " << e.what());
  }
}

// A forward whose params were mutated must fail with InvalidArgument naming `argument`, writing nothing.
void expect_invalid_forward(const std::function<void(Fixture&)>& mutate, const std::string& argument) {
  Fixture fx;
  REQUIRE(fx.untouched());
  mutate(fx);
  cpu().ran = false;
  expect_error<InvalidArgument>([&] { forward(cpu(), fx.p); }, ErrorCode::kInvalidArgument, argument);
  CHECK_MESSAGE(fx.untouched(), "an output was written before the error");
  CHECK_MESSAGE(!cpu().ran, "a stage ran before the error");
}

}  // namespace

TEST_CASE("the valid fixture runs") {
  Fixture fx;
  cpu().ran = false;
  forward(cpu(), fx.p);
  CHECK(cpu().ran);
  CHECK_FALSE(fx.untouched());
  // And on every real backend that runs on host memory.
  for (Backend* be : ref::available_backends()) {
    if (be->device_type() != DeviceType::kCpu) continue;
    Fixture real;
    forward(*be, real.p);
    CHECK_FALSE(real.untouched());
  }
}

TEST_CASE("tensor arguments") {
  SUBCASE("q of rank 3 without varlen") {
    expect_invalid_forward([](Fixture& f) {
      f.p.q.rank = 3;
      f.p.q.shape = {40, 4, 64, 0};
      f.p.q.stride = {256, 64, 1, 0};
    }, "q");
  }
  SUBCASE("null data") {
    expect_invalid_forward([](Fixture& f) { f.p.q.data = nullptr; }, "q");
    expect_invalid_forward([](Fixture& f) { f.p.k.data = nullptr; }, "k");
    expect_invalid_forward([](Fixture& f) { f.p.v.data = nullptr; }, "v");
    expect_invalid_forward([](Fixture& f) { f.p.o.data = nullptr; }, "o");
  }
  SUBCASE("dtype mismatch") {
    expect_invalid_forward([](Fixture& f) { f.p.k.dtype = DType::kF16; }, "k.dtype");
    expect_invalid_forward([](Fixture& f) { f.p.v.dtype = DType::kF16; }, "v.dtype");
    expect_invalid_forward([](Fixture& f) { f.p.q.dtype = DType::kF64; }, "q.dtype");
    expect_invalid_forward([](Fixture& f) { f.p.o.dtype = DType::kF16; }, "o.dtype");
    expect_invalid_forward([](Fixture& f) { f.p.lse.dtype = DType::kBF16; }, "lse.dtype");
    expect_invalid_forward([](Fixture& f) { f.p.routing.mask.dtype = DType::kI32; }, "routing.mask.dtype");
    expect_invalid_forward([](Fixture& f) { f.p.summary_query.dtype = DType::kF16; }, "summary_query.dtype");
    expect_invalid_forward([](Fixture& f) { f.p.summaries.dtype = DType::kF32; }, "summaries.dtype");
  }
  SUBCASE("h_q not a multiple of h_kv") {
    expect_invalid_forward([](Fixture& f) {
      f.p.k.shape[2] = 3;
      f.p.v.shape[2] = 3;
    }, "k.shape[2]");
  }
  SUBCASE("head dims that disagree") { expect_invalid_forward([](Fixture& f) { f.p.k.shape[3] = 32; }, "k.shape[3]"); }
  SUBCASE("v shaped unlike k") { expect_invalid_forward([](Fixture& f) { f.p.v.shape[1] = 39; }, "v.shape"); }
  SUBCASE("n_q > n_k") { expect_invalid_forward([](Fixture& f) { f.p.k.shape[1] = f.p.v.shape[1] = 30; }, "q.shape[1]"); }
  SUBCASE("batch of k unlike q") { expect_invalid_forward([](Fixture& f) { f.p.k.shape[0] = f.p.v.shape[0] = 2; }, "k.shape[0]"); }
  SUBCASE("d stride != 1") {
    expect_invalid_forward([](Fixture& f) { f.p.q.stride[3] = 2; }, "q.stride[3]");
    expect_invalid_forward([](Fixture& f) { f.p.o.stride[3] = 2; }, "o.stride[3]");
  }
  SUBCASE("mismatched devices") {
    expect_invalid_forward([](Fixture& f) { f.p.k.device = Device{DeviceType::kCuda, 0}; }, "k.device");
    expect_invalid_forward([](Fixture& f) { f.p.o.device = Device{DeviceType::kCpu, 1}; }, "o.device");
  }
  SUBCASE("tensors on a device the backend does not run on") {
    expect_invalid_forward([](Fixture& f) {
      for (TensorView* t : {&f.p.q, &f.p.k, &f.p.v, &f.p.o, &f.p.lse, &f.p.summary_query, &f.p.summaries,
                            &f.p.routing.mask, &f.p.routing.tau, &f.p.routing.mu, &f.p.routing.active_chunks})
        t->device = Device{DeviceType::kCuda, 0};
    }, "q.device");
  }
  SUBCASE("wrong output shapes") {
    expect_invalid_forward([](Fixture& f) { f.p.o.shape[2] = 2; }, "o.shape");
    expect_invalid_forward([](Fixture& f) { f.p.lse.shape[2] = 39; }, "lse.shape");
    expect_invalid_forward([](Fixture& f) { f.p.routing.mask.shape[1] = 4; }, "routing.mask.shape");
    expect_invalid_forward([](Fixture& f) { f.p.routing.tau.shape[1] = 2; }, "routing.tau.shape");
    expect_invalid_forward([](Fixture& f) { f.p.routing.mu.shape[1] = 4; }, "routing.mu.shape");
    expect_invalid_forward([](Fixture& f) { f.p.routing.active_chunks.dtype = DType::kU32; }, "routing.active_chunks.dtype");
    expect_invalid_forward([](Fixture& f) { f.p.summary_query.shape[0] = 4; }, "summary_query.shape");
    expect_invalid_forward([](Fixture& f) { f.p.summaries.shape[1] = 1; }, "summaries.shape");
  }
  SUBCASE("negative shape") { expect_invalid_forward([](Fixture& f) { f.p.o.shape[3] = -64; }, "o.shape"); }
}

TEST_CASE("method parameters") {
  for (float alpha : {1.0f, 0.5f, -2.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    expect_invalid_forward([alpha](Fixture& f) { f.p.method.alpha = alpha; }, "alpha");
  for (float sigma : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()})
    expect_invalid_forward([sigma](Fixture& f) { f.p.method.sigma = sigma; }, "sigma");
  for (int chunk : {0, 1, -16, 2048})
    expect_invalid_forward([chunk](Fixture& f) { f.p.method.chunk_size = chunk; }, "chunk_size");
  expect_invalid_forward([](Fixture& f) { f.p.method.gamma = std::numeric_limits<float>::infinity(); }, "gamma");
  expect_invalid_forward([](Fixture& f) { f.p.method.scale = -0.125f; }, "scale");
  expect_invalid_forward([](Fixture& f) { f.p.method.prior = static_cast<PriorMode>(7); }, "prior");
  expect_invalid_forward([](Fixture& f) { f.p.method.solver = static_cast<EntmaxSolver>(9); }, "solver");
}

TEST_CASE("summary cache and workspace") {
  expect_invalid_forward([](Fixture& f) { f.p.summaries_valid = 3; }, "summaries_valid");
  expect_invalid_forward([](Fixture& f) { f.p.summaries_valid = -1; }, "summaries_valid");
  expect_invalid_forward([](Fixture& f) {
    f.p.summaries = TensorView{};
    f.p.summaries_valid = 1;
  }, "summaries");
  expect_invalid_forward([](Fixture& f) { f.p.workspace_bytes = 1024; }, "workspace");
}

TEST_CASE("batch layouts") {
  // Packed varlen built on the fixture's rows: one sequence of 40.
  static const int32_t cu_ok[] = {0, 40};
  static const int32_t cu_bad_start[] = {1, 40};
  static const int32_t cu_short[] = {0, 39};
  static const int32_t lengths[] = {40};
  auto varlen = [](Fixture& f) {
    for (TensorView* t : {&f.p.q, &f.p.k, &f.p.v, &f.p.o}) {
      t->rank = 3;
      t->shape = {t->shape[1], t->shape[2], t->shape[3], 0};
      t->stride = {t->stride[1], t->stride[2], t->stride[3], 0};
    }
    f.p.batch.cu_seqlens_q = cu_ok;
    f.p.batch.cu_seqlens_k = cu_ok;
    f.p.batch.num_seqs = 1;
    f.p.batch.max_seqlen_q = 40;
    f.p.batch.max_seqlen_k = 40;
  };
  expect_invalid_forward([&](Fixture& f) {
    varlen(f);
    f.p.batch.cu_seqlens_q = cu_bad_start;
  }, "cu_seqlens_q[0]");
  expect_invalid_forward([&](Fixture& f) {
    varlen(f);
    f.p.batch.cu_seqlens_k = nullptr;
  }, "cu_seqlens_k");
  expect_invalid_forward([&](Fixture& f) {
    varlen(f);
    f.p.batch.num_seqs = 0;
  }, "num_seqs");
  expect_invalid_forward([&](Fixture& f) {
    varlen(f);
    f.p.batch.max_seqlen_q = 0;
  }, "max_seqlen_q");
  expect_invalid_forward([&](Fixture& f) {
    varlen(f);
    f.p.batch.cu_seqlens_q = cu_short;
  }, "cu_seqlens_q[num_seqs]");
  expect_invalid_forward([&](Fixture& f) {
    varlen(f);
    f.p.batch.seqlens_q = lengths;
  }, "seqlens_q/seqlens_k");
  // Padded lengths out of range or with n_q > n_k.
  static const int32_t too_long[] = {41};
  static const int32_t short_k[] = {10};
  expect_invalid_forward([&](Fixture& f) { f.p.batch.seqlens_k = too_long; }, "seqlens_k[0]");
  expect_invalid_forward([&](Fixture& f) { f.p.batch.seqlens_k = short_k; }, "seqlens_q[0]");
}

TEST_CASE("backend selection") {
  expect_error<BackendUnavailable>([] { Registry::instance().select("tpu"); }, ErrorCode::kBackendUnavailable, "tpu");
  CHECK(Registry::instance().find("tpu") == nullptr);
  if (Backend* be = Registry::instance().find("cpu"); be && be->probe().available)
    CHECK(std::string(Registry::instance().select("cpu").name()) == "cpu");
  // A backend that is registered but has no device reports why, naming itself.
  for (Backend* be : Registry::instance().all()) {
    if (be->probe().available) continue;
    const std::string name = be->name();
    expect_error<BackendUnavailable>([&] { Registry::instance().select(name); }, ErrorCode::kBackendUnavailable, name);
  }
}

TEST_CASE("stage entry points validate too") {
  Fixture fx;
  cpu().ran = false;
  RouteParams rp;
  rp.q = fx.p.q;
  rp.summaries = fx.summaries.view;
  rp.n_k = 40;
  rp.method = fx.p.method;
  rp.routing.tau = fx.tau.view;
  rp.routing.mu = fx.mu.view;
  expect_error<InvalidArgument>([&] { route(cpu(), rp); }, ErrorCode::kInvalidArgument, "routing.mask");
  rp.routing.mask = fx.mask.view;
  rp.n_k = 20;
  expect_error<InvalidArgument>([&] { route(cpu(), rp); }, ErrorCode::kInvalidArgument, "n_k");

  SummarizeParams sp;
  sp.k = fx.p.k;
  sp.summaries = fx.summaries.view;
  sp.method = fx.p.method;
  sp.first_chunk = -1;
  expect_error<InvalidArgument>([&] { summarize(cpu(), sp); }, ErrorCode::kInvalidArgument, "first_chunk");

  AttendParams ap;
  ap.q = fx.p.q;
  ap.k = fx.p.k;
  ap.v = fx.p.v;
  ap.o = fx.p.o;
  ap.method = fx.p.method;
  ap.routing.mask = fx.mask.view;
  expect_error<InvalidArgument>([&] { attend(cpu(), ap); }, ErrorCode::kInvalidArgument, "summaries");

  DenseParams dp;
  dp.q = fx.p.q;
  dp.k = fx.p.k;
  dp.v = fx.p.v;
  dp.o = fx.p.o;
  dp.scale = -1.0f;
  expect_error<InvalidArgument>([&] { dense_attention(cpu(), dp); }, ErrorCode::kInvalidArgument, "scale");
  CHECK(fx.untouched());
  CHECK_FALSE(cpu().ran);
}

TEST_CASE("Decoder arguments") {
  DecoderConfig dc;
  dc.h_q = 4;
  dc.h_kv = 3;
  dc.d = 64;
  expect_error<InvalidArgument>([&] { Decoder dec(cpu(), dc); }, ErrorCode::kInvalidArgument, "h_kv");
  dc.h_kv = 2;
  dc.method.alpha = 1.0f;
  expect_error<InvalidArgument>([&] { Decoder dec(cpu(), dc); }, ErrorCode::kInvalidArgument, "alpha");
  dc.method.alpha = 1.5f;
  dc.dtype = DType::kF64;
  expect_error<InvalidArgument>([&] { Decoder dec(cpu(), dc); }, ErrorCode::kInvalidArgument, "dtype");
  dc.dtype = DType::kBF16;
  dc.batch = 0;
  expect_error<InvalidArgument>([&] { Decoder dec(cpu(), dc); }, ErrorCode::kInvalidArgument, "batch");

  // A step with keys of the wrong shape is refused and leaves the decoder where it was.
  dc.batch = 1;
  Decoder dec(cpu(), dc);
  Fixture fx;
  ref::HostTensor q = ref::make_host_tensor(DType::kBF16, {1, 2, 4, 64});
  ref::HostTensor k = ref::make_host_tensor(DType::kBF16, {1, 3, 2, 64});
  ref::HostTensor o = ref::make_host_tensor(DType::kBF16, {1, 2, 4, 64});
  expect_error<InvalidArgument>([&] { dec.step(q.view, k.view, k.view, o.view); }, ErrorCode::kInvalidArgument,
                                "k.shape");
  CHECK(dec.length() == 0);
}
