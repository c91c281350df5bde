#include "plot_png.h"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

#include "dashattn/error.h"
#include "dashattn/geometry.h"

namespace dashattn::cli {
namespace {

struct Rgb {
  uint8_t r, g, b;
};

constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kText{30, 30, 30};
constexpr Rgb kFrame{90, 90, 90};
constexpr Rgb kInvisible{214, 214, 214};  // chunks after the diagonal: no query of the block can see them
constexpr Rgb kDiagonal{235, 130, 20};
constexpr Rgb kNeedle{210, 20, 30};
constexpr Rgb kNotRoutedNeedleColumn{255, 228, 228};

// White (never routed) to dark blue (routed by every query of the block).
Rgb routed_colour(double fraction) {
  const Rgb lo{255, 255, 255}, mid{107, 174, 214}, hi{8, 48, 107};
  auto mix = [](Rgb a, Rgb b, double t) {
    return Rgb{static_cast<uint8_t>(a.r + (b.r - a.r) * t + 0.5), static_cast<uint8_t>(a.g + (b.g - a.g) * t + 0.5),
               static_cast<uint8_t>(a.b + (b.b - a.b) * t + 0.5)};
  };
  fraction = std::clamp(fraction, 0.0, 1.0);
  return fraction < 0.5 ? mix(lo, mid, fraction * 2.0) : mix(mid, hi, (fraction - 0.5) * 2.0);
}

// A 5x7 bitmap font for the labels, enough to avoid a font dependency.
struct Glyph {
  char c;
  const char* rows[7];
};

const Glyph kGlyphs[] = {
    {'A', {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'B', {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}},
    {'C', {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}},
    {'D', {"####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."}},
    {'E', {"#####", "#....", "#....", "####.", "#....", "#....", "#####"}},
    {'F', {"#####", "#....", "#....", "####.", "#....", "#....", "#...."}},
    {'G', {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".###."}},
    {'H', {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
    {'I', {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'J', {"..###", "...#.", "...#.", "...#.", "#..#.", "#..#.", ".##.."}},
    {'K', {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}},
    {'L', {"#....", "#....", "#....", "#....", "#....", "#....", "#####"}},
    {'M', {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}},
    {'N', {"#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#", "#...#"}},
    {'O', {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'P', {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}},
    {'Q', {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}},
    {'R', {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}},
    {'S', {".####", "#....", "#....", ".###.", "....#", "....#", "####."}},
    {'T', {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
    {'U', {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
    {'V', {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
    {'W', {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}},
    {'X', {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}},
    {'Y', {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}},
    {'Z', {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}},
    {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
    {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
    {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
    {'3', {"####.", "....#", "....#", ".###.", "....#", "....#", "####."}},
    {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
    {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
    {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
    {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
    {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
    {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
    {'%', {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}},
    {'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
    {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
    {'/', {"....#", "....#", "...#.", "..#..", ".#...", "#....", "#...."}},
    {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
    {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
    {',', {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."}},
    {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
    {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
};

const Glyph* find_glyph(char c) {
  c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const Glyph& g : kGlyphs) {
    if (g.c == c) return &g;
  }
  return nullptr;
}

class Canvas {
 public:
  Canvas(int width, int height) : width_(width), height_(height), pixels_(static_cast<size_t>(width * height * 3)) {
    fill(0, 0, width, height, kBackground);
  }

  int width() const { return width_; }
  int height() const { return height_; }

  void fill(int x, int y, int w, int h, Rgb c) {
    for (int yy = std::max(y, 0); yy < std::min(y + h, height_); ++yy) {
      for (int xx = std::max(x, 0); xx < std::min(x + w, width_); ++xx) {
        uint8_t* p = &pixels_[static_cast<size_t>((yy * width_ + xx) * 3)];
        p[0] = c.r;
        p[1] = c.g;
        p[2] = c.b;
      }
    }
  }

  void frame(int x, int y, int w, int h, Rgb c) {
    fill(x - 1, y - 1, w + 2, 1, c);
    fill(x - 1, y + h, w + 2, 1, c);
    fill(x - 1, y - 1, 1, h + 2, c);
    fill(x + w, y - 1, 1, h + 2, c);
  }

  // Returns the x just past the text.
  int text(int x, int y, const std::string& s, int scale, Rgb c) {
    for (char ch : s) {
      if (const Glyph* g = find_glyph(ch)) {
        for (int row = 0; row < 7; ++row) {
          for (int col = 0; col < 5; ++col) {
            if (g->rows[row][col] == '#') fill(x + col * scale, y + row * scale, scale, scale, c);
          }
        }
      }
      x += 6 * scale;
    }
    return x;
  }

  static int text_width(const std::string& s, int scale) { return static_cast<int>(s.size()) * 6 * scale; }

  const uint8_t* row(int y) const { return &pixels_[static_cast<size_t>(y * width_ * 3)]; }

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;
};

void write_png(const std::string& path, const Canvas& canvas) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) throw IoError(path, std::string("cannot open for writing: ") + std::strerror(errno));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
  if (png == nullptr || info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    throw IoError(path, "libpng could not be initialized");
  }
  // libpng reports errors by longjmp; nothing with a destructor is created between here and the writes.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw IoError(path, "libpng failed while writing the image");
  }
  png_init_io(png, file.get());
  png_set_IHDR(png, info, static_cast<png_uint_32>(canvas.width()), static_cast<png_uint_32>(canvas.height()), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < canvas.height(); ++y) png_write_row(png, const_cast<png_bytep>(canvas.row(y)));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  if (std::fflush(file.get()) != 0) throw IoError(path, std::string("write failed: ") + std::strerror(errno));
}

// Counts over one cell of the (possibly binned) grid of one KV head.
struct CellCounts {
  int64_t routed = 0, routable = 0, diagonal = 0;
};

}  // namespace

void write_routing_plot(const std::string& path, const RoutingPlot& plot) {
  const int64_t C = plot.chunk;
  const int64_t first_block = (plot.n_k - plot.n_q) / C;  // query blocks by absolute position
  const int64_t last_block = (plot.n_k - 1) / C;
  const int64_t blocks = last_block - first_block + 1;
  const int64_t chunks = num_chunks_total(plot.n_k, C);

  // Bin blocks and chunks when the grid is wider than the image should be.
  constexpr int64_t kMaxCells = 512;
  const int64_t bin = (std::max(blocks, chunks) + kMaxCells - 1) / kMaxCells;
  const int64_t rows = (blocks + bin - 1) / bin, cols = (chunks + bin - 1) / bin;
  const int cell = static_cast<int>(std::clamp<int64_t>(kMaxCells / std::max(rows, cols), 1, 12));
  const int panel_w = static_cast<int>(cols) * cell, panel_h = static_cast<int>(rows) * cell;

  constexpr int kMargin = 24, kGap = 36, kTop = 82, kTick = 7;
  const std::string legend1 = "SHARE OF THE BLOCK QUERIES ROUTING:";
  const std::string legend2 = "DIAGONAL      NOT VISIBLE      NEEDLE CHUNK / ITS QUERIES";
  const int legend_w = std::max(Canvas::text_width(legend1, 2) + 320, Canvas::text_width(legend2, 2) + 60);
  // Each panel's slot is at least as wide as its title, so small grids do not overlap their labels.
  const int slot_w = std::max(panel_w, Canvas::text_width("KV HEAD " + std::to_string(plot.h_kv - 1), 2));
  const int panels_w = static_cast<int>(plot.h_kv) * slot_w + static_cast<int>(plot.h_kv - 1) * kGap;
  const int width = 2 * kMargin + std::max({panels_w, legend_w, Canvas::text_width(plot.title, 2)});
  const int height = kTop + panel_h + 2 * kTick + 24 + 70;
  Canvas canvas(width, height);

  canvas.text(kMargin, 10, plot.title, 2, kText);
  canvas.text(kMargin, 32, "DOWN: QUERY BLOCKS OF " + std::to_string(C * bin) + "   ACROSS: CHUNKS" +
                               (bin > 1 ? " (" + std::to_string(bin) + " PER CELL)" : ""), 1, kText);

  std::vector<char> needle_column(static_cast<size_t>(cols), 0);
  for (const PlotNeedle& nd : plot.needles) {
    if (nd.chunk >= 0 && nd.chunk < chunks) needle_column[static_cast<size_t>(nd.chunk / bin)] = 1;
  }

  for (int64_t r = 0; r < plot.h_kv; ++r) {
    const int x0 = kMargin + static_cast<int>(r) * (slot_w + kGap);
    const int y0 = kTop;
    canvas.text(x0, kTop - 32, "KV HEAD " + std::to_string(r), 2, kText);

    std::vector<CellCounts> counts(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < plot.n_q; ++i) {
      const int64_t p = query_position(i, plot.n_q, plot.n_k);
      const int64_t diag = diagonal_chunk(p, C);
      const int64_t row = (diag - first_block) / bin;
      const uint32_t* bits = plot.mask + (r * plot.n_q + i) * plot.words;
      CellCounts* line = &counts[static_cast<size_t>(row * cols)];
      for (int64_t c = 0; c < diag; ++c) {
        CellCounts& cc = line[c / bin];
        ++cc.routable;
        cc.routed += mask_bit(bits, c) ? 1 : 0;
      }
      ++line[diag / bin].diagonal;
    }

    for (int64_t row = 0; row < rows; ++row) {
      for (int64_t col = 0; col < cols; ++col) {
        const CellCounts& cc = counts[static_cast<size_t>(row * cols + col)];
        Rgb colour = kInvisible;
        if (cc.diagonal > 0) {
          colour = kDiagonal;
        } else if (cc.routable > 0) {
          const double f = static_cast<double>(cc.routed) / static_cast<double>(cc.routable);
          colour = (cc.routed == 0 && needle_column[static_cast<size_t>(col)]) ? kNotRoutedNeedleColumn
                                                                               : routed_colour(f);
        }
        canvas.fill(x0 + static_cast<int>(col) * cell, y0 + static_cast<int>(row) * cell, cell, cell, colour);
      }
    }
    canvas.frame(x0, y0, panel_w, panel_h, kFrame);

    // Needle chunk ticks above and below the panel, needle query ticks left of it.
    const int tick_w = std::max(cell, 3);
    for (const PlotNeedle& nd : plot.needles) {
      const int cx = x0 + static_cast<int>(nd.chunk / bin) * cell + cell / 2 - tick_w / 2;
      canvas.fill(cx, y0 - kTick - 2, tick_w, kTick, kNeedle);
      canvas.fill(cx, y0 + panel_h + 2, tick_w, kTick, kNeedle);
      const int64_t b_begin = std::clamp<int64_t>(nd.query_begin, 0, plot.n_q - 1);
      const int64_t b_end = std::clamp<int64_t>(nd.query_end - 1, 0, plot.n_q - 1);
      const int64_t row_begin = (diagonal_chunk(query_position(b_begin, plot.n_q, plot.n_k), C) - first_block) / bin;
      const int64_t row_end = (diagonal_chunk(query_position(b_end, plot.n_q, plot.n_k), C) - first_block) / bin;
      canvas.fill(x0 - kTick - 2, y0 + static_cast<int>(row_begin) * cell, kTick,
                  static_cast<int>(row_end - row_begin + 1) * cell, kNeedle);
      // Frame the cells where the needle queries meet the needle chunk: their shade is the answer to "routed?".
      if (cell >= 3) {
        canvas.frame(x0 + static_cast<int>(nd.chunk / bin) * cell + 1, y0 + static_cast<int>(row_begin) * cell + 1,
                     cell - 2, static_cast<int>(row_end - row_begin + 1) * cell - 2, kNeedle);
      }
    }
    // Chunk index at both ends of the x axis.
    const int label_y = y0 + panel_h + kTick + 6;
    canvas.text(x0, label_y, "0", 1, kText);
    if (chunks > 1) {
      const std::string last = std::to_string(chunks - 1);
      canvas.text(x0 + std::max(panel_w - Canvas::text_width(last, 1), 12), label_y, last, 1, kText);
    }
  }

  // Legend: the colour ramp, then the swatches.
  int ly = kTop + panel_h + 2 * kTick + 24;
  int lx = canvas.text(kMargin, ly, legend1, 2, kText) + 12;
  lx = canvas.text(lx, ly, "0%", 2, kText) + 6;
  for (int t = 0; t < 160; ++t) canvas.fill(lx + t, ly, 1, 14, routed_colour(t / 159.0));
  canvas.frame(lx, ly, 160, 14, kFrame);
  canvas.text(lx + 166, ly, "100%", 2, kText);

  ly += 30;
  lx = kMargin;
  canvas.fill(lx, ly, 14, 14, kDiagonal);
  lx = canvas.text(lx + 20, ly, "DIAGONAL", 2, kText) + 24;
  canvas.fill(lx, ly, 14, 14, kInvisible);
  canvas.frame(lx, ly, 14, 14, kFrame);
  lx = canvas.text(lx + 20, ly, "NOT VISIBLE", 2, kText) + 24;
  canvas.fill(lx + 4, ly, 6, 14, kNeedle);
  canvas.text(lx + 20, ly, "NEEDLE CHUNK / ITS QUERIES", 2, kText);

  write_png(path, canvas);
}

}  // namespace dashattn::cli
