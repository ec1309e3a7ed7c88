#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/trainer/png_decode.h"
#include "trainer/loop/metrics_log.h"
#include "trainer/plotting/plot.h"
#include "trainer/plotting/png_image.h"
#include "support/torch_compat.h"  // compat::remove_all

namespace enginery {
namespace {

TEST(Png, ChecksumsMatchPublishedValues) {
  const char* check = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(check), 9), 0xCBF43926u);
  const char* wiki = "Wikipedia";
  EXPECT_EQ(adler32(reinterpret_cast<const uint8_t*>(wiki), 9), 0x11E60398u);
}

// Decodes our own output the long way (chunks, CRCs, stored deflate blocks, Adler-32) and compares the pixels.
TEST(Png, EncodedImageDecodesToTheSamePixels) {
  Image img(300, 250, {1, 2, 3});  // 300*3+1 bytes per row * 250 rows > 65535: several stored blocks
  img.line(0, 0, 299, 249, {250, 10, 20});
  img.text(10, 10, "LOSS 0.5%", {0, 0, 0}, 2);
  const DecodedPng png = decode_png(img.encode_png());
  EXPECT_EQ(png.width, 300u);
  EXPECT_EQ(png.height, 250u);
  ASSERT_EQ(png.rows.size(), 250u * (300 * 3 + 1));
  for (int y = 0; y < 250; y += 7) {
    for (int x = 0; x < 300; x += 11) {
      const Rgb c = img.get(x, y), q = png.at(x, y);
      EXPECT_EQ(q.r, c.r);
      EXPECT_EQ(q.g, c.g);
      EXPECT_EQ(q.b, c.b);
    }
  }
  EXPECT_EQ(img.get(150, 125).r, 250);  // on the diagonal
}

TEST(Plot, DrawsLossAndAccuracyFromMetrics) {
  const auto dir = std::filesystem::temp_directory_path() / ("enginery_plot_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    MetricsLog log(dir.string(), -1);
    for (int s = 1; s <= 20; ++s) log.write({{"step", s}, {"loss", 3.0 / s}, {"grad_norm", 1.0}, {"lr", 1e-3}});
    log.write({{"step", 20}, {"accuracy", 0.75}, {"val_loss", 0.3}});
  }
  const std::string png = (dir / "m.png").string();
  plot_run(dir.string(), png);
  std::ifstream in(png, std::ios::binary);
  char sig[8];
  in.read(sig, 8);
  EXPECT_EQ(std::memcmp(sig, "\x89PNG\r\n\x1a\n", 8), 0);
  EXPECT_GT(std::filesystem::file_size(png), 100000u);  // two 900x300 panels, uncompressed

  MetricsLog resumed(dir.string(), 10);  // keeps steps <= 10 only
  resumed.write({{"step", 11}, {"loss", 0.1}});
  std::ifstream lines(dir / "metrics.jsonl");
  int count = 0;
  for (std::string line; std::getline(lines, line);) ++count;
  EXPECT_EQ(count, 11);
  enginery::compat::remove_all(dir);
}

TEST(MetricsLog, FormatsProgressAndSummary) {
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(3720), "1h02m");
  const std::string line = format_step({40, 300, 1.23456, 0.5, 1e-3, 5100, 62});
  EXPECT_EQ(line, "step  40/300 | loss 1.2346 | grad_norm 0.500 | lr 1.00e-03 | 5.1k tok/s | ETA 1m02s");
  RunSummary s;
  s.steps = 300, s.has_accuracy = true, s.last_accuracy = 0.9;
  EXPECT_NE(format_summary(s).find("| held-out exact match"), std::string::npos);
}

}  // namespace
}  // namespace enginery
