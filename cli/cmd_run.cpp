// dashattn run: prefill attention over q, k, v read from a tensor file; outputs and routing written to a file.
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "exit_codes.h"
#include "options.h"
#include "output.h"
#include "plot_png.h"
#include "report.h"
#include "sequences.h"
#include "tensor_input.h"

namespace dashattn::cli {
namespace {

struct RunOptions {
  CommonOptions common;
  MethodOptions method;
  InputOptions input;
  std::string output;
  std::string plot;
};

// Output formats that hold several named tensors.
const CLI::Validator kMultiTensorFile(
    [](std::string& path) -> std::string {
      io::FileFormat f;
      if (!io::format_from_extension(path, &f) || f == io::FileFormat::kNpy) {
        return "expected a .safetensors or .npz file name (several tensors are written), got '" + path + "'";
      }
      return {};
    },
    "FILE.safetensors|FILE.npz");

void write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw IoError(path, "cannot write the statistics sidecar");
}

int run_run(const RunOptions& opt) {
  const MethodParams method = opt.method.params();
  const HostProblem problem = load_problem(opt.input);
  Backend& backend = opt.common.select_backend();
  const ForwardOutputs out = run_forward(backend, problem, method);
  const RoutingStats stats = stats_of(out, problem, method);

  io::FileFormat format = io::FileFormat::kSafetensors;
  io::format_from_extension(opt.output, &format);
  io::TensorFile file;
  io::Tensor o = to_input_layout(out.o, opt.input.layout, problem.source_rank);
  std::string o_note;
  if (format == io::FileFormat::kNpz && o.dtype() == DType::kBF16) {
    // NumPy has no bf16: store the exact f32 widening rather than fail.
    o = from_float("o", DType::kF32, o.shape(), to_float(o));
    o_note = "bf16 output stored as f32 (NumPy has no bf16)";
  }
  file.add(o);
  file.add(out.lse);
  file.add(out.mask);
  file.add(out.active);

  nlohmann::json info;
  info["backend"] = backend.name();
  info["input"] = opt.input.path;
  info["layout"] = opt.input.layout;
  info["problem"] = problem_json(problem);
  info["method"] = method_json(method);
  info["stats"] = stats_json(stats);
  info["seconds"] = out.seconds;
  info["mask_words"] = out.words();
  if (!o_note.empty()) info["note"] = o_note;

  std::string sidecar;
  if (format == io::FileFormat::kSafetensors) {
    file.metadata["dashattn"] = info.dump();
  } else {
    sidecar = opt.output + ".json";
  }
  io::write_tensor_file(opt.output, file);
  if (!sidecar.empty()) write_json_file(sidecar, info);

  if (!opt.plot.empty()) {
    // The first sequence, at its own length in a batch of several lengths.
    const SequenceSpan first = span_of(problem, 0);
    const ForwardOutputs first_out = sequence_outputs(problem, out, 0, method.chunk_size);
    RoutingPlot plot;
    plot.mask = reinterpret_cast<const uint32_t*>(first_out.mask.data());
    plot.h_kv = problem.h_kv();
    plot.n_q = first.n_q;
    plot.n_k = first.n_k;
    plot.chunk = method.chunk_size;
    plot.words = first_out.words();
    plot.title = "DASHATTENTION ROUTING, N=" + std::to_string(first.n_k) + ", SPARSITY " +
                 format_percent(stats.sparsity);
    write_routing_plot(opt.plot, plot);
  }

  if (opt.common.json) {
    info["output"] = opt.output;
    if (!sidecar.empty()) info["stats_file"] = sidecar;
    if (!opt.plot.empty()) info["plot"] = opt.plot;
    print_json(info);
    return kExitOk;
  }
  std::cout << "ran " << problem.describe() << " on " << backend.name() << " in "
            << format_fixed(out.seconds * 1e3, 2) << " ms\n"
            << "sparsity " << format_percent(stats.sparsity) << ", active chunks per query "
            << format_fixed(stats.mean_active_chunks, 2) << "\n";
  Table heads({"kv head", "active chunks/query", "sparsity"});
  for (size_t r = 0; r < stats.per_kv_head.size(); ++r) {
    heads.add_row({std::to_string(r), format_fixed(stats.per_kv_head[r].mean_active_chunks, 2),
                   format_percent(stats.per_kv_head[r].sparsity)});
  }
  heads.print(std::cout);
  std::cout << "wrote o, lse, mask, active_chunks to " << opt.output;
  if (!sidecar.empty()) std::cout << " (statistics in " << sidecar << ")";
  if (!o_note.empty()) std::cout << "; " << o_note;
  std::cout << "\n";
  if (!opt.plot.empty()) std::cout << "plot: " << opt.plot << "\n";
  return kExitOk;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
  auto opt = std::make_shared<RunOptions>();
  CLI::App* app = parent.add_subcommand(
      "run", "Prefill: attention over q, k, v from a tensor file; writes o, lse, mask, active chunks and stats");
  add_common_options(*app, opt->common);
  add_method_options(*app, opt->method);
  add_input_options(*app, opt->input, true);
  app->add_option("--output,-o", opt->output,
                  "Output file (.safetensors: statistics in its metadata; .npz: statistics in FILE.npz.json)")
      ->required()
      ->check(kMultiTensorFile);
  app->add_option("--plot", opt->plot, "Write a PNG heat map of the routing mask (first sequence)");
  return {app, [opt] { return run_run(*opt); }};
}

}  // namespace dashattn::cli
