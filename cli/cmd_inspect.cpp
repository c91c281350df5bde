// dashattn inspect FILE: tensors, dtypes, shapes, byte sizes and metadata of a tensor file.
#include <iostream>
#include <memory>

#include "commands.h"
#include "dashattn/io/tensor_file.h"
#include "exit_codes.h"
#include "options.h"
#include "output.h"

namespace dashattn::cli {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

Command add_inspect_command(CLI::App& parent) {
  struct Options {
    std::string path;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* app = parent.add_subcommand("inspect", "List the tensors of a safetensors, .npy or .npz file");
  app->add_option("file", options->path, "Tensor file")->required();
  app->add_flag("--json", options->json, "Machine-readable JSON on stdout instead of text");

  auto run = [options]() -> int {
    const io::TensorFile file = io::read_tensor_file(options->path);
    io::FileFormat format = io::FileFormat::kSafetensors;
    const bool known = io::format_from_extension(options->path, &format);
    uint64_t total = 0;
    for (const io::Tensor& t : file) total += t.nbytes();

    if (options->json) {
      nlohmann::json j;
      j["file"] = options->path;
      if (known) j["format"] = io::file_format_name(format);
      j["total_bytes"] = total;
      j["tensors"] = nlohmann::json::array();
      for (const io::Tensor& t : file) {
        j["tensors"].push_back(
            {{"name", t.name()}, {"dtype", dtype_name(t.dtype())}, {"shape", t.shape()}, {"bytes", t.nbytes()}});
      }
      j["metadata"] = file.metadata;
      print_json(j);
      return kExitOk;
    }

    std::cout << options->path << (known ? std::string(" (") + io::file_format_name(format) + ")" : "") << ": "
              << file.size() << " tensor" << (file.size() == 1 ? "" : "s") << ", " << format_bytes(total) << "\n";
    Table table({"name", "dtype", "shape", "bytes"});
    for (const io::Tensor& t : file) {
      table.add_row({t.name(), dtype_name(t.dtype()), shape_text(t.shape()), std::to_string(t.nbytes())});
    }
    table.print(std::cout);
    if (!file.metadata.empty()) {
      std::cout << "metadata:\n";
      for (const auto& [key, value] : file.metadata) std::cout << "  " << key << " = " << value << "\n";
    }
    return kExitOk;
  };
  return {app, run};
}

}  // namespace dashattn::cli
