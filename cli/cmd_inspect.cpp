// dashattn inspect FILE: tensors, dtypes, shapes, byte sizes and metadata of a tensor file, and the page geometry
// of a paged K/V cache (a block_table beside k).
#include <iostream>
#include <memory>

#include "commands.h"
#include "dashattn/io/tensor_file.h"
#include "exit_codes.h"
#include "options.h"
#include "output.h"

namespace dashattn::cli {
namespace {

struct PagedCache {
  int64_t page_size = 0, pages = 0, sequences = 0, width = 0;
};

// A block table beside a rank-4 k under the default names: k is then a page pool [pages, P, h_kv, d] (the bnhd
// order; run and verify check the rest).
bool paged_cache(const io::TensorFile& file, PagedCache* out) {
  if (!file.contains("block_table") || !file.contains("k")) return false;
  const io::Tensor& table = file.at("block_table");
  const io::Tensor& k = file.at("k");
  if (table.rank() != 2 || k.rank() != 4) return false;
  *out = PagedCache{k.shape()[1], k.shape()[0], table.shape()[0], table.shape()[1]};
  return true;
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
      PagedCache paged;
      if (paged_cache(file, &paged)) {
        j["paged"] = {{"page_size", paged.page_size},
                      {"pages", paged.pages},
                      {"sequences", paged.sequences},
                      {"block_table_width", paged.width}};
      }
      print_json(j);
      return kExitOk;
    }

    std::cout << options->path << (known ? std::string(" (") + io::file_format_name(format) + ")" : "") << ": "
              << file.size() << " tensor" << (file.size() == 1 ? "" : "s") << ", " << format_bytes(total) << "\n";
    Table table({"name", "dtype", "shape", "bytes"});
    for (const io::Tensor& t : file) {
      table.add_row({t.name(), dtype_name(t.dtype()), format_shape(t.shape()), std::to_string(t.nbytes())});
    }
    table.print(std::cout);
    PagedCache paged;
    if (paged_cache(file, &paged)) {
      std::cout << "paged: " << paged.page_size << "-key pages, " << paged.pages << " pages; block table of "
                << paged.sequences << " sequences, " << paged.width << " pages each\n";
    }
    if (!file.metadata.empty()) {
      std::cout << "metadata:\n";
      for (const auto& [key, value] : file.metadata) std::cout << "  " << key << " = " << value << "\n";
    }
    return kExitOk;
  };
  return {app, run};
}

}  // namespace dashattn::cli
