// Heat map of a routing mask, written as PNG with libpng.
//
// One panel per KV head, side by side: query blocks of C consecutive queries down, chunks across, the colour of
// a cell the fraction of the block's queries that routed the chunk. The diagonal chunk has its own colour, chunks
// no query of the block can see are grey, and planted needles are marked by red ticks on their chunk column and
// on the rows of the queries that should retrieve them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dashattn::cli {

struct PlotNeedle {
  int64_t chunk = 0;
  int64_t query_begin = 0, query_end = 0;  // query indices (rows of the mask), end exclusive
};

struct RoutingPlot {
  const uint32_t* mask = nullptr;  // [h_kv, n_q, words] of one sequence
  int64_t h_kv = 0, n_q = 0, n_k = 0, chunk = 0, words = 0;
  std::vector<PlotNeedle> needles;
  std::string title;  // upper case letters, digits and " %-=/:.,()" are drawn; anything else becomes a space
};

// Throws IoError when the file cannot be written.
void write_routing_plot(const std::string& path, const RoutingPlot& plot);

}  // namespace dashattn::cli
