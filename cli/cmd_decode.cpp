// dashattn decode: replays a prompt through dashattn::Decoder, then steps the remaining tokens a few at a time,
// and checks the outputs against one prefill of the same tokens.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>

#include "commands.h"
#include "device_tensor.h"
#include "exit_codes.h"
#include "options.h"
#include "output.h"
#include "report.h"
#include "tensor_input.h"

namespace dashattn::cli {
namespace {

struct DecodeOptions {
  CommonOptions common;
  MethodOptions method;
  InputOptions input;
  int64_t prompt_len = 0;
  int64_t steps = -1;  // -1: as many as the input holds
  int64_t tokens_per_step = 1;
  int64_t page_size = 0;  // > 0: the Decoder keeps K and V in pages of this many keys
  double tolerance = -1;  // -1: derived from the dtype
  std::string output;
};

// Rows [begin, end) of the token axis of a [b, n, h, d] tensor, contiguous.
io::Tensor slice_tokens(const io::Tensor& t, int64_t begin, int64_t end) {
  const auto& s = t.shape();
  io::Tensor out(t.name(), t.dtype(), {s[0], end - begin, s[2], s[3]});
  const size_t row = static_cast<size_t>(s[2] * s[3] * dtype_size(t.dtype()));
  for (int64_t b = 0; b < s[0]; ++b) {
    std::memcpy(out.data() + static_cast<size_t>(b * (end - begin)) * row,
                t.data() + static_cast<size_t>(b * s[1] + begin) * row, static_cast<size_t>(end - begin) * row);
  }
  return out;
}

// Writes a [b, t, ...] tensor into rows [begin, begin + t) of a [b, n, ...] tensor of the same trailing shape.
void place_tokens(io::Tensor& dst, const io::Tensor& src, int64_t begin) {
  const auto& d = dst.shape();
  const int64_t t = src.shape()[1];
  size_t row = static_cast<size_t>(dtype_size(dst.dtype()));
  for (size_t i = 2; i < d.size(); ++i) row *= static_cast<size_t>(d[i]);
  for (int64_t b = 0; b < d[0]; ++b) {
    std::memcpy(dst.data() + static_cast<size_t>(b * d[1] + begin) * row,
                src.data() + static_cast<size_t>(b * t) * row, static_cast<size_t>(t) * row);
  }
}

double default_tolerance(DType t, double max_abs) {
  // Two units in the last place of the output dtype at the output's magnitude: a decode step and a prefill may
  // accumulate the same terms in a different order, nothing more.
  const double ulp = t == DType::kBF16 ? 0x1.0p-7 : t == DType::kF16 ? 0x1.0p-10 : 0x1.0p-23;
  return 2.0 * ulp * std::max(max_abs, 1e-3);
}

int run_decode(const DecodeOptions& opt) {
  const MethodParams method = opt.method.params();
  HostProblem full = load_problem(opt.input);
  if (full.layout.any()) {
    // The Decoder owns a contiguous cache of equal-length sequences; lengths and pages have nothing to replay into.
    throw InvalidArgument("--input", "contiguous q, k, v of equal-length sequences (decode replays them)",
                          "a batch layout (seqlens_k, cu_seqlens or block_table); use run or verify");
  }
  if (full.n_q() != full.n_k()) {
    throw InvalidArgument("--q", "as many queries as keys (" + std::to_string(full.n_k()) + ") to replay",
                          std::to_string(full.n_q()) + " queries");
  }
  const int64_t n = full.n_k();
  if (opt.prompt_len < 1 || opt.prompt_len > n) {
    throw InvalidArgument("--prompt-len", "in [1, " + std::to_string(n) + "] (tokens in the input)",
                          std::to_string(opt.prompt_len));
  }
  if (opt.tokens_per_step < 1) {
    throw InvalidArgument("--tokens-per-step", ">= 1", std::to_string(opt.tokens_per_step));
  }
  if (opt.page_size != 0 && !is_valid_page_size(opt.page_size, method.chunk_size)) {
    throw InvalidArgument("--page-size",
                          "0 (contiguous caches) or a multiple of 64 and of --chunk = " +
                              std::to_string(method.chunk_size),
                          std::to_string(opt.page_size));
  }
  const int64_t room = (n - opt.prompt_len) / opt.tokens_per_step;
  const int64_t steps = opt.steps < 0 ? room : opt.steps;
  if (steps > room) {
    throw InvalidArgument("--steps", "at most " + std::to_string(room) + " steps of " +
                                         std::to_string(opt.tokens_per_step) + " tokens after a prompt of " +
                                         std::to_string(opt.prompt_len) + " in " + std::to_string(n) + " tokens",
                          std::to_string(steps));
  }
  const int64_t total = opt.prompt_len + steps * opt.tokens_per_step;

  HostProblem problem;  // the replayed tokens only
  problem.q = slice_tokens(full.q, 0, total);
  problem.k = slice_tokens(full.k, 0, total);
  problem.v = slice_tokens(full.v, 0, total);
  problem.summary_query = full.summary_query;
  problem.source_rank = full.source_rank;

  Backend& backend = opt.common.select_backend();
  const int64_t b = problem.batch(), hq = problem.h_q(), hkv = problem.h_kv(), d = problem.d();
  DeviceTensor summary_query;
  if (problem.has_summary_query()) {
    summary_query = DeviceTensor::from_host(backend, DType::kF32, problem.summary_query.shape(),
                                            problem.summary_query.data());
  }
  DecoderConfig cfg;
  cfg.batch = b;
  cfg.h_q = hq;
  cfg.h_kv = hkv;
  cfg.d = d;
  cfg.dtype = problem.dtype();
  cfg.method = method;
  cfg.page_size = opt.page_size;
  Decoder decoder(backend, cfg, problem.has_summary_query() ? summary_query.view() : TensorView{});

  io::Tensor o_decode("o", problem.dtype(), {b, total, hq, d});
  const int64_t words_total = mask_words(total, method.chunk_size);
  // Decode masks re-laid to the prefill's row width, so rows compare directly.
  std::vector<uint32_t> mask_decode(static_cast<size_t>(b * hkv * total * words_total), 0u);

  ProgressBar progress("decode", steps + 1);
  double seconds = 0;
  for (int64_t begin = 0; begin < total;) {
    const int64_t end = begin == 0 ? opt.prompt_len : begin + opt.tokens_per_step;
    const int64_t t = end - begin;
    const int64_t words = mask_words(end, method.chunk_size);
    DeviceTensor q = DeviceTensor::from_host(backend, problem.dtype(), {b, t, hq, d},
                                             slice_tokens(problem.q, begin, end).data());
    DeviceTensor k = DeviceTensor::from_host(backend, problem.dtype(), {b, t, hkv, d},
                                             slice_tokens(problem.k, begin, end).data());
    DeviceTensor v = DeviceTensor::from_host(backend, problem.dtype(), {b, t, hkv, d},
                                             slice_tokens(problem.v, begin, end).data());
    DeviceTensor o(backend, problem.dtype(), {b, t, hq, d});
    DeviceTensor mask(backend, DType::kU32, {b, hkv, t, words});
    RoutingView routing;
    routing.mask = mask.view();
    backend.synchronize(nullptr);
    const auto start = std::chrono::steady_clock::now();
    decoder.step(q.view(), k.view(), v.view(), o.view(), TensorView{}, routing);
    backend.synchronize(nullptr);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    io::Tensor o_host("o", problem.dtype(), {b, t, hq, d});
    o.download(o_host.data());
    place_tokens(o_decode, o_host, begin);
    const std::vector<uint32_t> m = mask.to_host<uint32_t>();
    for (int64_t s = 0; s < b; ++s) {
      for (int64_t r = 0; r < hkv; ++r) {
        for (int64_t i = 0; i < t; ++i) {
          std::memcpy(&mask_decode[static_cast<size_t>(((s * hkv + r) * total + begin + i) * words_total)],
                      &m[static_cast<size_t>(((s * hkv + r) * t + i) * words)], static_cast<size_t>(words) * 4);
        }
      }
    }
    begin = end;
    progress.advance();
  }
  progress.finish();

  const ForwardOutputs prefill = run_forward(backend, problem, method);
  const Difference diff = compare(o_decode, prefill.o);
  const double tolerance = opt.tolerance >= 0 ? opt.tolerance : default_tolerance(problem.dtype(), diff.max_abs_reference);
  int64_t mask_rows_differing = 0;
  const uint32_t* mp = reinterpret_cast<const uint32_t*>(prefill.mask.data());
  for (int64_t row = 0; row < b * hkv * total; ++row) {
    if (std::memcmp(&mp[static_cast<size_t>(row * words_total)], &mask_decode[static_cast<size_t>(row * words_total)],
                    static_cast<size_t>(words_total) * 4) != 0) {
      ++mask_rows_differing;
    }
  }
  const bool agree = diff.max_abs <= tolerance && mask_rows_differing == 0;

  if (!opt.output.empty()) {
    io::TensorFile file;
    file.add(to_input_layout(o_decode, opt.input.layout, problem.source_rank));
    io::write_tensor_file(opt.output, file);
  }

  if (opt.common.json) {
    nlohmann::json j;
    j["backend"] = backend.name();
    j["problem"] = problem_json(problem);
    j["method"] = method_json(method);
    j["prompt_len"] = opt.prompt_len;
    j["steps"] = steps;
    j["tokens_per_step"] = opt.tokens_per_step;
    j["page_size"] = opt.page_size;
    j["pages"] = decoder.num_pages();
    j["max_abs_difference"] = diff.max_abs;
    j["relative_difference"] = diff.relative;
    j["tolerance"] = tolerance;
    j["mask_rows_differing"] = mask_rows_differing;
    j["agree"] = agree;
    j["seconds"] = {{"decode", seconds}, {"prefill", prefill.seconds}};
    if (!opt.output.empty()) j["output"] = opt.output;
    print_json(j);
  } else {
    std::cout << "decoded " << problem.describe() << " on " << backend.name() << ": prompt of " << opt.prompt_len
              << " tokens, then " << steps << " step" << (steps == 1 ? "" : "s") << " of " << opt.tokens_per_step
              << " token" << (opt.tokens_per_step == 1 ? "" : "s")
              << (opt.page_size > 0 ? ", K/V in " + std::to_string(decoder.num_pages()) + " pages of " +
                                          std::to_string(opt.page_size) + " keys"
                                    : std::string())
              << " (" << format_fixed(seconds * 1e3, 2)
              << " ms; prefill " << format_fixed(prefill.seconds * 1e3, 2) << " ms)\n"
              << "decode vs prefill: max abs difference " << format_general(diff.max_abs) << " (tolerance "
              << format_general(tolerance) << "), mask rows differing " << mask_rows_differing << " of "
              << b * hkv * total << "\n"
              << (agree ? "agree" : "DISAGREE") << "\n";
    if (!opt.output.empty()) std::cout << "wrote o to " << opt.output << "\n";
  }
  if (!agree) {
    std::cerr << "error: decode and prefill disagree (max abs difference " << format_general(diff.max_abs)
              << ", tolerance " << format_general(tolerance) << ", mask rows differing " << mask_rows_differing
              << ")\n";
    return kExitVerificationFailed;
  }
  return kExitOk;
}

}  // namespace

Command add_decode_command(CLI::App& parent) {
  auto opt = std::make_shared<DecodeOptions>();
  CLI::App* app = parent.add_subcommand(
      "decode", "Replay the first tokens as a prompt with the Decoder, step the rest, compare with a prefill");
  add_common_options(*app, opt->common);
  add_method_options(*app, opt->method);
  add_input_options(*app, opt->input, true);
  app->add_option("--prompt-len", opt->prompt_len, "Tokens of the prompt (the first decoder step)")->required();
  app->add_option("--steps", opt->steps, "Decode steps after the prompt; -1: as many as the input holds");
  app->add_option("--tokens-per-step", opt->tokens_per_step, "Tokens appended per decode step");
  app->add_option("--page-size", opt->page_size,
                  "Keys per page of a paged K/V cache (a multiple of 64 and of --chunk); 0: contiguous caches");
  app->add_option("--tolerance", opt->tolerance,
                  "Largest max-abs difference from the prefill that counts as agreement; -1: two units in the "
                  "last place of the dtype at the output's magnitude");
  app->add_option("--output,-o", opt->output, "Write the decoded o to this tensor file");
  return {app, [opt] { return run_decode(*opt); }};
}

}  // namespace dashattn::cli
