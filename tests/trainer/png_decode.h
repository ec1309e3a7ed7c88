#pragma once
// Reads back the PNGs trainer/plotting/png_image.cpp writes (8-bit RGB, stored deflate blocks, filter 0 on every row) the
// long way, checking each chunk's CRC, the zlib header, every stored block's length pair and the Adler-32 with
// gtest expectations: enough for tests to look at the pixels a plot drew.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "trainer/plotting/png_image.h"

namespace enginery {

struct DecodedPng {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rows;  // each row: its filter byte, then RGB triples
  Rgb at(int x, int y) const {
    const uint8_t* p = &rows[static_cast<size_t>(y) * (width * 3 + 1) + 1 + static_cast<size_t>(x) * 3];
    return {p[0], p[1], p[2]};
  }
};

inline uint32_t png_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

inline DecodedPng decode_png(const std::vector<uint8_t>& png) {
  DecodedPng out;
  EXPECT_GE(png.size(), 8u);
  if (png.size() < 8 || std::memcmp(png.data(), "\x89PNG\r\n\x1a\n", 8) != 0) {
    ADD_FAILURE() << "no PNG signature";
    return out;
  }
  std::vector<uint8_t> idat;
  size_t pos = 8;
  bool saw_end = false;
  while (pos + 12 <= png.size()) {
    const uint32_t len = png_be32(&png[pos]);
    const std::string type(png.begin() + pos + 4, png.begin() + pos + 8);
    EXPECT_EQ(crc32(&png[pos + 4], len + 4), png_be32(&png[pos + 8 + len])) << type;
    if (type == "IHDR") out.width = png_be32(&png[pos + 8]), out.height = png_be32(&png[pos + 12]);
    if (type == "IDAT") idat.insert(idat.end(), png.begin() + pos + 8, png.begin() + pos + 8 + len);
    if (type == "IEND") saw_end = true;
    pos += 12 + len;
  }
  EXPECT_TRUE(saw_end);
  if (idat.size() < 6) {
    ADD_FAILURE() << "no image data";
    return out;
  }
  EXPECT_EQ((idat[0] * 256 + idat[1]) % 31, 0);  // zlib header check
  size_t p = 2;
  for (bool last = false; !last && p + 5 <= idat.size();) {
    last = idat[p] & 1;
    EXPECT_EQ(idat[p] & 6, 0);  // stored
    const uint16_t n = idat[p + 1] | (idat[p + 2] << 8);
    const uint16_t nn = idat[p + 3] | (idat[p + 4] << 8);
    EXPECT_EQ(uint16_t(~n), nn);
    out.rows.insert(out.rows.end(), idat.begin() + p + 5, idat.begin() + p + 5 + n);
    p += 5 + n;
  }
  EXPECT_EQ(png_be32(&idat[p]), adler32(out.rows.data(), out.rows.size()));
  EXPECT_EQ(out.rows.size(), size_t(out.height) * (out.width * 3 + 1));
  for (uint32_t y = 0; y < out.height && y * (out.width * 3 + 1) < out.rows.size(); ++y) {
    EXPECT_EQ(out.rows[y * (out.width * 3 + 1)], 0) << "row " << y;
  }
  return out;
}

inline DecodedPng read_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return decode_png(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
}

}  // namespace enginery
