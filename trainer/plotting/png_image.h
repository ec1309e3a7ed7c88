#pragma once
// A tiny RGB raster with line drawing and a 5x7 bitmap font, and a PNG writer (zlib stored blocks, CRC-32,
// Adler-32): enough for `enginery plot` without a plotting library.
#include <cstdint>
#include <string>
#include <vector>

namespace enginery {

struct Rgb {
  uint8_t r, g, b;
};

class Image {
 public:
  Image(int width, int height, Rgb background);
  int width() const { return width_; }
  int height() const { return height_; }
  void set(int x, int y, Rgb color);
  Rgb get(int x, int y) const;
  void line(double x0, double y0, double x1, double y1, Rgb color, int thickness = 1);
  void rect(int x0, int y0, int x1, int y1, Rgb color);  // outline
  // Text in the 5x7 font (digits, letters, a little punctuation), `scale` pixels per font pixel.
  void text(int x, int y, const std::string& s, Rgb color, int scale = 1);
  static int text_width(const std::string& s, int scale = 1) { return static_cast<int>(s.size()) * 6 * scale; }

  std::vector<uint8_t> encode_png() const;
  void write_png(const std::string& path) const;

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;  // RGB rows
};

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
uint32_t adler32(const uint8_t* data, size_t n);

}  // namespace enginery
