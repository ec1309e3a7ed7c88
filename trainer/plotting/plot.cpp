#include "trainer/plotting/plot.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <vector>

#include "host_api/error.h"
#include "trainer/plotting/png_image.h"

namespace enginery {
namespace {

struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;  // (finite step, value); a non-finite value is kept as NaN
  Rgb color;                                      // so that the line breaks there
  bool percent = false;
  size_t non_finite = 0;  // points whose value is NaN
  size_t finite() const { return points.size() - non_finite; }
};

struct Metrics {
  Series loss{"training loss", {}, {31, 119, 180}};
  Series accuracy{"held-out exact match", {}, {214, 39, 40}, true};
  Series val_loss{"validation loss", {}, {44, 160, 44}};
  size_t skipped_lines = 0;
};

bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

// Python's json module writes NaN, Infinity and -Infinity, C's printf nan and inf. None of them is JSON, and no
// valid JSON has a bare word other than true/false/null outside a string, so reading them as null changes no
// valid line while keeping the step of a line that has one.
std::string null_for_non_finite(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  for (size_t i = 0; i < line.size();) {
    const char c = line[i];
    const bool sign = (c == '-' || c == '+') && i + 1 < line.size() && is_alpha(line[i + 1]);
    if (in_string || (!sign && !is_alpha(c))) {
      out += c;
      if (in_string && c == '\\' && i + 1 < line.size()) {
        out += line[++i];
      } else if (c == '"') {
        in_string = !in_string;
      }
      ++i;
      continue;
    }
    const size_t begin = sign ? i + 1 : i;
    size_t end = begin;
    while (end < line.size() && is_alpha(line[end])) ++end;
    std::string word = line.substr(begin, end - begin);
    for (char& w : word) w = static_cast<char>(std::tolower(static_cast<unsigned char>(w)));
    out += (word == "nan" || word == "inf" || word == "infinity") ? std::string("null") : line.substr(i, end - i);
    i = end;
  }
  return out;
}

void add(Series& s, double step, const nlohmann::json& value) {
  const bool finite = value.is_number() && std::isfinite(value.get<double>());
  s.points.push_back({step, finite ? value.get<double>() : NAN});
  if (!finite) ++s.non_finite;
}

// One metrics line into `m`; returns why it was skipped, or "" when it was used.
std::string read_line(const std::string& text, Metrics& m) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(null_for_non_finite(text));
  } catch (const nlohmann::json::exception& e) {
    return std::string("not JSON: ") + e.what();
  }
  if (!j.is_object()) return "not a JSON object";
  const auto step = j.find("step");
  if (step == j.end() || !step->is_number() || !std::isfinite(step->get<double>())) {
    return "no finite numeric \"step\"";
  }
  if (j.contains("accuracy")) {
    add(m.accuracy, step->get<double>(), j["accuracy"]);
  } else if (j.contains("val_loss")) {
    add(m.val_loss, step->get<double>(), j["val_loss"]);
  } else if (j.contains("loss")) {
    add(m.loss, step->get<double>(), j["loss"]);
  }
  return "";
}

Metrics read_metrics(const std::string& path, std::ostream& warnings) {
  std::ifstream in(path);
  if (!in) throw EngineryError("cannot open metrics", path, "the output directory of enginery train");
  constexpr size_t kNamed = 10;  // lines skipped past this are only counted: a garbage file must not flood stderr
  Metrics m;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank: nothing lost
    const std::string why = read_line(line, m);
    if (!why.empty() && ++m.skipped_lines <= kNamed) {
      warnings << path << ":" << line_no << ": skipped: " << why << "\n";
    }
  }
  if (m.skipped_lines > kNamed) warnings << path << ": " << m.skipped_lines - kNamed << " more lines skipped\n";
  return m;
}

// A value range mapped onto a pixel span. Computed by halves and convex combinations so that values near
// ±DBL_MAX give no inf or NaN, and clamped to the span: a drawn line costs its length in pixels, so no value may
// put an end point far outside the image (one step of -2.5e9 beside steps up to 1000 once made a 2e9-pixel line).
struct Axis {
  double lo, hi, p0, p1;
  double value_at(double t) const { return lo * (1 - t) + hi * t; }
  double pixel(double v) const {
    const double p = p0 + (p1 - p0) * ((v / 2 - lo / 2) / (hi / 2 - lo / 2));
    return std::isfinite(p) ? std::clamp(p, std::min(p0, p1), std::max(p0, p1)) : p0;
  }
};

// [lo, hi] given a nonzero width and widened by `pad` of it on each side, within ±DBL_MAX.
std::pair<double, double> widen(double lo, double hi, double pad) {
  if (lo > hi) lo = 0, hi = 1;  // nothing finite to range over
  if (!(hi > lo)) {
    const double d = std::max(1.0, std::abs(lo) / 4);
    lo -= d, hi += d;
  }
  const double margin = 2 * pad * (hi / 2 - lo / 2);
  return {std::max(lo - margin, -DBL_MAX), std::min(hi + margin, DBL_MAX)};
}

std::string number(double v, bool percent) {
  char buffer[32];
  if (percent && std::abs(v) <= 100) {
    std::snprintf(buffer, sizeof(buffer), "%.0f%%", 100.0 * v);
  } else if (std::abs(v) >= 100 || (std::abs(v) < 0.01 && v != 0)) {
    std::snprintf(buffer, sizeof(buffer), "%.2e", v);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.3f", v);
  }
  return buffer;
}

std::string step_label(double step) {
  char buffer[32];
  if (std::abs(step) >= 1e9) {
    std::snprintf(buffer, sizeof(buffer), "%.2e", step);
  } else {
    std::snprintf(buffer, sizeof(buffer), step == std::round(step) ? "%.0f" : "%.2f", step);
  }
  return buffer;
}

struct Frame {
  int left, right, top, bottom;
};

void draw_axes(Image& img, const Frame& f, const Axis& x, const Axis& y, bool percent) {
  const Rgb axis{90, 90, 90}, grid{225, 225, 225};
  for (int k = 0; k <= 4; ++k) {
    const int py = static_cast<int>(std::lround(y.p0 + (y.p1 - y.p0) * k / 4.0));
    img.line(f.left, py, f.right, py, grid);
    const std::string label = number(y.value_at(k / 4.0), percent);
    img.text(f.left - 6 - Image::text_width(label), py - 3, label, axis);
  }
  for (int k = 0; k <= 4; ++k) {
    const int px = static_cast<int>(std::lround(x.p0 + (x.p1 - x.p0) * k / 4.0));
    const std::string label = step_label(x.value_at(k / 4.0));
    img.text(px - Image::text_width(label) / 2, f.bottom + 6, label, axis);
  }
  img.text(f.right - Image::text_width("step"), f.bottom + 16, "step", axis);
  img.rect(f.left, f.top, f.right, f.bottom, axis);
}

void draw_points(Image& img, const Series& s, const Axis& x, const Axis& y) {
  const bool mark = s.points.size() < 60;  // sparse series (evaluations): mark each point
  for (size_t i = 0; i < s.points.size(); ++i) {
    const auto& [step, value] = s.points[i];
    if (!std::isfinite(value)) continue;
    const double px = x.pixel(step), py = y.pixel(value);
    if (i > 0 && std::isfinite(s.points[i - 1].second)) {
      img.line(x.pixel(s.points[i - 1].first), y.pixel(s.points[i - 1].second), px, py, s.color, 2);
    }
    if (mark) {
      for (int d = -2; d <= 2; ++d) img.line(px - 2, py + d, px + 2, py + d, s.color);
    }
  }
}

std::string metrics_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "metrics.jsonl").string();
}

// Reads <dir>/metrics.jsonl; throws when it holds no finite training loss.
Metrics read_run(const std::string& run_dir, std::ostream& warnings, std::string& path) {
  path = metrics_path(run_dir);
  Metrics m = read_metrics(path, warnings);
  if (m.loss.finite() == 0) {
    throw EngineryError("no finite training loss to draw (" + std::to_string(m.skipped_lines) + " lines skipped, " +
                            std::to_string(m.loss.non_finite) + " non-finite losses)",
                        path, "JSON lines such as {\"step\": 1, \"loss\": 2.5}, as enginery train writes them");
  }
  return m;
}

// One panel: the series drawn on it (one per run), its title and whether its values are fractions.
struct Panel {
  std::vector<const Series*> series;
  std::string title;
  bool percent = false;
};

void draw_overlay(Image& img, const Panel& panel, int top, int height, const Axis& steps) {
  const Frame f{80, img.width() - 20, top + 24, top + height - 28};
  img.text(f.left, top + 6, panel.title, {20, 20, 20}, 2);
  double lo = panel.percent ? 0.0 : INFINITY, hi = panel.percent ? 1.0 : -INFINITY;
  size_t non_finite = 0;
  for (const Series* s : panel.series) {
    non_finite += s->non_finite;
    for (const auto& [step, value] : s->points) {
      if (std::isfinite(value)) lo = std::min(lo, value), hi = std::max(hi, value);
    }
  }
  if (non_finite > 0) {
    const std::string note = std::to_string(non_finite) + " non-finite values not drawn";
    img.text(f.right - Image::text_width(note), top + 10, note, {200, 0, 0});
  }
  const auto [y_lo, y_hi] = widen(lo, hi, panel.percent ? 0.0 : 0.05);
  const Axis x{steps.lo, steps.hi, double(f.left), double(f.right)};
  const Axis y{y_lo, y_hi, double(f.bottom), double(f.top)};
  draw_axes(img, f, x, y, panel.percent);
  for (const Series* s : panel.series) draw_points(img, *s, x, y);
}

Rgb from_hsv(double hue, double saturation, double value) {
  const double h = hue * 6, c = value * saturation, x = c * (1 - std::abs(std::fmod(h, 2.0) - 1)), m = value - c;
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(h) % 6) {
    case 0: r = c, g = x; break;
    case 1: r = x, g = c; break;
    case 2: g = c, b = x; break;
    case 3: g = x, b = c; break;
    case 4: r = x, b = c; break;
    default: r = c, b = x; break;
  }
  auto byte = [m](double v) { return static_cast<uint8_t>(std::lround(255 * (v + m))); };
  return {byte(r), byte(g), byte(b)};
}

int64_t squared_distance(Rgb a, Rgb b) {
  const int64_t dr = a.r - b.r, dg = a.g - b.g, db = a.b - b.b;
  return dr * dr + dg * dg + db * db;
}

uint32_t packed(Rgb c) { return (uint32_t(c.r) << 16) | (uint32_t(c.g) << 8) | c.b; }

// One colour per label, never the same twice: the usual 8-colour palette, then colours spread over hue, saturation
// and lightness (a golden-ratio sequence), each kept only when it is far from every colour before it. Once none is
// found far enough (past about a hundred labels), the rest are merely different: the whole RGB cube in a scrambled
// order, skipping used ones. The work stays linear in the labels past that point.
std::vector<Rgb> label_colours(size_t n) {
  std::vector<Rgb> colours = {{31, 119, 180}, {214, 39, 40},  {44, 160, 44},   {255, 127, 14},
                              {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207}};
  std::set<uint32_t> used;
  for (const Rgb& c : colours) used.insert(packed(c));
  constexpr int64_t kFar = 50 * 50;  // squared RGB distance
  constexpr int kTries = 1024;
  bool far_ones_left = true;
  uint64_t k = 0;
  auto frac = [](double v) { return v - std::floor(v); };
  while (colours.size() < n) {
    Rgb next{};
    bool found = false;
    for (int tries = 0; far_ones_left && !found && tries < kTries; ++tries, ++k) {
      const double t = static_cast<double>(k);
      next = from_hsv(frac(0.05 + 0.6180339887 * t), 0.45 + 0.5 * frac(0.7548776662 * t),
                      0.4 + 0.5 * frac(0.5698402910 * t));
      found = true;
      for (const Rgb& c : colours) found = found && squared_distance(c, next) >= kFar;
    }
    if (!found) {
      far_ones_left = false;
      do {  // an odd multiplier permutes the 2^24 colours
        const uint32_t v = static_cast<uint32_t>((k++ * 2654435761u) & 0xFFFFFFu);
        next = {static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
      } while (used.count(packed(next)) != 0);
    }
    used.insert(packed(next));
    colours.push_back(next);
  }
  colours.resize(n);
  return colours;
}

// Refuses, before anything is read, an output that would replace an input of the plot or a file enginery did not
// write: only a new path or an earlier PNG may be written.
void check_output(const std::string& png_path, const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path out(png_path);
  if (!fs::exists(out, ec)) return;
  const std::string allowed = "a new path, or a PNG an earlier enginery plot wrote";
  for (const std::string& input : inputs) {
    if (fs::equivalent(out, input, ec)) {
      throw EngineryError("is " + input + ", an input of this plot: writing the PNG there would replace it",
                          "enginery plot -o " + png_path, allowed);
    }
  }
  char signature[8] = {};
  std::ifstream in(out, std::ios::binary);
  const bool png = fs::is_regular_file(out, ec) && in.read(signature, sizeof(signature)) &&
                   std::memcmp(signature, "\x89PNG\r\n\x1a\n", sizeof(signature)) == 0;
  if (!png) {
    throw EngineryError("exists and is not a PNG, so enginery did not write it: writing the plot would replace it",
                        "enginery plot -o " + png_path, allowed);
  }
}

}  // namespace

PlotReport plot_run(const std::string& run_dir, const std::string& png_path) {
  return plot_run(run_dir, png_path, std::cerr);
}

PlotReport plot_run(const std::string& run_dir, const std::string& png_path, std::ostream& warnings) {
  check_output(png_path, {metrics_path(run_dir)});
  std::string path;
  const Metrics m = read_run(run_dir, warnings, path);
  std::vector<const Series*> drawn = {&m.loss};
  if (!m.accuracy.points.empty()) {
    drawn.push_back(&m.accuracy);
  } else if (!m.val_loss.points.empty()) {
    drawn.push_back(&m.val_loss);
  }
  PlotReport report;
  report.skipped_lines = m.skipped_lines;
  double first = 0, last = -INFINITY;  // the step axis starts at 0 unless a step is negative
  for (const Series* s : drawn) {
    report.points += s->finite(), report.non_finite += s->non_finite;
    for (const auto& point : s->points) first = std::min(first, point.first), last = std::max(last, point.first);
  }
  if (report.non_finite > 0) warnings << path << ": " << report.non_finite << " non-finite values not drawn\n";
  const auto [step_lo, step_hi] = widen(first, last, 0.0);
  const int panel_height = 300;
  Image img(900, panel_height * static_cast<int>(drawn.size()) + 10, {255, 255, 255});
  for (size_t i = 0; i < drawn.size(); ++i) {
    const Panel panel{{drawn[i]}, drawn[i]->title, drawn[i]->percent};
    draw_overlay(img, panel, 5 + static_cast<int>(i) * panel_height, panel_height, {step_lo, step_hi, 0, 0});
  }
  img.write_png(png_path);
  return report;
}

LabelledRun parse_labelled_run(const std::string& arg) {
  std::error_code ec;
  const auto eq = arg.find('=');
  if (eq != std::string::npos && eq > 0 && eq + 1 < arg.size() && !std::filesystem::exists(arg, ec)) {
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  }
  std::filesystem::path dir(arg);
  if (!dir.has_filename()) dir = dir.parent_path();  // "runs/demo/" -> "demo"
  return {dir.filename().string(), arg};
}

PlotReport plot_runs(const std::vector<LabelledRun>& runs, const std::string& png_path, std::ostream& warnings) {
  if (runs.empty()) throw EngineryError("no run to draw", "enginery plot", "one or more run directories");
  std::vector<std::string> inputs;
  std::vector<std::string> labels;  // in first-seen order, one colour each
  for (const auto& run : runs) {
    inputs.push_back(metrics_path(run.dir));
    if (std::find(labels.begin(), labels.end(), run.label) == labels.end()) labels.push_back(run.label);
  }
  check_output(png_path, inputs);
  const std::vector<Rgb> colours = label_colours(labels.size());
  std::vector<Metrics> metrics;
  metrics.reserve(runs.size());
  PlotReport report;
  for (const auto& run : runs) {
    std::string path;
    metrics.push_back(read_run(run.dir, warnings, path));
    const auto label = std::find(labels.begin(), labels.end(), run.label) - labels.begin();
    Metrics& m = metrics.back();
    for (Series* s : {&m.loss, &m.accuracy, &m.val_loss}) s->color = colours[static_cast<size_t>(label)];
    report.skipped_lines += m.skipped_lines;
  }
  Panel loss{{}, "training loss"}, accuracy{{}, "held-out exact match", true}, val_loss{{}, "validation loss"};
  for (const Metrics& m : metrics) {
    loss.series.push_back(&m.loss);
    if (!m.accuracy.points.empty()) accuracy.series.push_back(&m.accuracy);
    if (!m.val_loss.points.empty()) val_loss.series.push_back(&m.val_loss);
  }
  std::vector<const Panel*> panels = {&loss};
  for (const Panel* p : {&accuracy, &val_loss}) {
    if (!p->series.empty()) panels.push_back(p);
  }
  double first = 0, last = -INFINITY;
  for (const Panel* p : panels) {
    for (const Series* s : p->series) {
      report.points += s->finite(), report.non_finite += s->non_finite;
      for (const auto& point : s->points) first = std::min(first, point.first), last = std::max(last, point.first);
    }
  }
  const auto [step_lo, step_hi] = widen(first, last, 0.0);
  const int panel_height = 300, legend_height = 14 * static_cast<int>(labels.size()) + 10;
  Image img(900, legend_height + panel_height * static_cast<int>(panels.size()) + 10, {255, 255, 255});
  for (size_t i = 0; i < labels.size(); ++i) {
    const int y = 8 + 14 * static_cast<int>(i);
    img.line(80, y + 3, 100, y + 3, colours[i], 3);
    img.text(108, y, labels[i], {20, 20, 20});
  }
  for (size_t i = 0; i < panels.size(); ++i) {
    draw_overlay(img, *panels[i], legend_height + static_cast<int>(i) * panel_height, panel_height,
                 {step_lo, step_hi, 0, 0});
  }
  img.write_png(png_path);
  return report;
}

}  // namespace enginery
