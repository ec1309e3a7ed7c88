#include "trainer/plot.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "host_api/error.h"
#include "trainer/png_image.h"

namespace enginery {
namespace {

struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;  // (step, value)
  Rgb color;
  bool percent = false;
};

std::string number(double v, bool percent) {
  char buffer[32];
  if (percent) {
    std::snprintf(buffer, sizeof(buffer), "%.0f%%", 100.0 * v);
  } else if (std::abs(v) >= 100 || (std::abs(v) < 0.01 && v != 0)) {
    std::snprintf(buffer, sizeof(buffer), "%.2e", v);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3f", v);
  }
  return buffer;
}

void draw_panel(Image& img, const Series& s, int top, int height, double max_step) {
  const Rgb axis{90, 90, 90}, grid{225, 225, 225}, ink{20, 20, 20};
  const int left = 80, right = img.width() - 20, plot_top = top + 24, bottom = top + height - 28;
  img.text(left, top + 6, s.title, ink, 2);
  double lo = s.percent ? 0.0 : INFINITY, hi = s.percent ? 1.0 : -INFINITY;
  for (const auto& [x, y] : s.points) {
    if (!std::isfinite(y)) continue;
    lo = std::min(lo, y), hi = std::max(hi, y);
  }
  if (!(hi > lo)) hi = lo + 1.0;
  const double pad = s.percent ? 0.0 : 0.05 * (hi - lo);
  lo -= pad, hi += pad;
  auto px = [&](double step) { return left + (right - left) * (max_step > 0 ? step / max_step : 0.0); };
  auto py = [&](double v) { return bottom - (bottom - plot_top) * (v - lo) / (hi - lo); };
  for (int k = 0; k <= 4; ++k) {
    const double v = lo + (hi - lo) * k / 4.0;
    const int y = static_cast<int>(std::lround(py(v)));
    img.line(left, y, right, y, grid);
    const std::string label = number(v, s.percent);
    img.text(left - 6 - Image::text_width(label), y - 3, label, axis);
  }
  for (int k = 0; k <= 4; ++k) {
    const double step = max_step * k / 4.0;
    const std::string label = std::to_string(static_cast<long long>(std::lround(step)));
    img.text(static_cast<int>(px(step)) - Image::text_width(label) / 2, bottom + 6, label, axis);
  }
  img.text(right - Image::text_width("step"), bottom + 16, "step", axis);
  img.rect(left, plot_top, right, bottom, axis);
  for (size_t i = 0; i < s.points.size(); ++i) {
    const auto& [x, y] = s.points[i];
    if (!std::isfinite(y)) continue;
    if (i > 0 && std::isfinite(s.points[i - 1].second)) {
      img.line(px(s.points[i - 1].first), py(s.points[i - 1].second), px(x), py(y), s.color, 2);
    }
    if (s.points.size() < 60) {  // sparse series (evaluations): mark each point
      for (int d = -2; d <= 2; ++d) img.line(px(x) - 2, py(y) + d, px(x) + 2, py(y) + d, s.color);
    }
  }
}

}  // namespace

void plot_run(const std::string& run_dir, const std::string& png_path) {
  const std::string path = (std::filesystem::path(run_dir) / "metrics.jsonl").string();
  std::ifstream in(path);
  if (!in) throw EngineryError("cannot open metrics", path, "the output directory of enginery train");
  Series loss{"training loss", {}, {31, 119, 180}};
  Series accuracy{"held-out exact match", {}, {214, 39, 40}, true};
  Series val_loss{"validation loss", {}, {44, 160, 44}};
  double max_step = 0;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      throw EngineryError(std::string("invalid JSON: ") + e.what(), path + ":" + std::to_string(line_no));
    }
    const double step = j.value("step", 0.0);
    max_step = std::max(max_step, step);
    if (j.contains("accuracy")) {
      accuracy.points.push_back({step, j["accuracy"].get<double>()});
    } else if (j.contains("val_loss")) {
      val_loss.points.push_back({step, j["val_loss"].get<double>()});
    } else if (j.contains("loss")) {
      loss.points.push_back({step, j["loss"].get<double>()});
    }
  }
  if (loss.points.empty()) throw EngineryError("no training steps recorded", path);
  std::vector<const Series*> panels = {&loss};
  if (!accuracy.points.empty()) {
    panels.push_back(&accuracy);
  } else if (!val_loss.points.empty()) {
    panels.push_back(&val_loss);
  }
  const int panel_height = 300;
  Image img(900, panel_height * static_cast<int>(panels.size()) + 10, {255, 255, 255});
  for (size_t i = 0; i < panels.size(); ++i) {
    draw_panel(img, *panels[i], 5 + static_cast<int>(i) * panel_height, panel_height, max_step);
  }
  img.write_png(png_path);
}

}  // namespace enginery
