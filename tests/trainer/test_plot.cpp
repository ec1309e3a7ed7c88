// `enginery plot` on hostile metrics.jsonl files: non-finite values, lines that are not metrics, absurd steps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <set>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "host_api/error.h"
#include "support/torch_compat.h"  // compat::remove_all
#include "tests/trainer/png_decode.h"
#include "trainer/loop/metrics_log.h"
#include "trainer/plotting/plot.h"

namespace enginery {
namespace {

class PlotInput : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("enginery_plot_input_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { compat::remove_all(dir_); }

  std::string metrics() const { return (dir_ / "metrics.jsonl").string(); }
  std::string png() const { return (dir_ / "m.png").string(); }
  // Appends raw lines; returns the 1-based line number of each in the file.
  std::vector<int> append(const std::vector<std::string>& lines) {
    int existing = 0;
    {
      std::ifstream in(metrics());
      for (std::string l; std::getline(in, l);) ++existing;
    }
    std::ofstream out(metrics(), std::ios::app);
    std::vector<int> numbers;
    for (const auto& l : lines) out << l << '\n', numbers.push_back(++existing);
    return numbers;
  }
  bool is_png(const std::string& path) const {
    std::ifstream in(path, std::ios::binary);
    char sig[8] = {};
    in.read(sig, 8);
    return in && std::memcmp(sig, "\x89PNG\r\n\x1a\n", 8) == 0;
  }
  // The message of the EngineryError plot_run throws, or "" when it draws.
  std::string error_of(std::ostringstream& warnings) {
    try {
      plot_run(dir_.string(), png(), warnings);
    } catch (const EngineryError& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
};

TEST_F(PlotInput, NonFiniteValuesAndGarbageLinesAreSkippedAndCounted) {
  {
    MetricsLog log(dir_.string(), -1);  // how a diverged run writes NaN and inf today: as null
    log.write({{"step", 1}, {"loss", 2.0}});
    log.write({{"step", 2}, {"loss", std::nan("")}});
    log.write({{"step", 3}, {"loss", INFINITY}});
  }
  append({R"({"step": 4, "loss": NaN})", R"({"step": 5, "loss": -Infinity})", R"({"step": 6, "loss": inf})",
          R"({"step": 7, "loss": 1.0})", "", R"({"step": 8, "loss": "nan"})",
          R"({"step": 9, "accuracy": null, "val_loss": 0.3})", R"({"step": 10, "accuracy": 0.5})",
          R"({"step": 11, "loss": 0.8, "note": "a \"NaN\" in a string, and -inf"})"});
  const auto garbage = append({"this is not json", R"({"loss": 0.5})", "[1, 2, 3]", R"({"step": "seven", "loss": 1})",
                               R"({"step": NaN, "loss": 1})", R"({"step": 12, "loss": 0.7)"});

  std::ostringstream warnings;
  const PlotReport report = plot_run(dir_.string(), png(), warnings);
  EXPECT_EQ(report.points, 4u);       // losses at steps 1, 7, 11 and the accuracy at step 10
  EXPECT_EQ(report.non_finite, 7u);   // losses at steps 2-6 and 8, the accuracy at step 9
  EXPECT_EQ(report.skipped_lines, 6u);
  for (int line : garbage) {
    EXPECT_NE(warnings.str().find(metrics() + ":" + std::to_string(line) + ": skipped"), std::string::npos)
        << "line " << line << " not named in:\n" << warnings.str();
  }
  EXPECT_NE(warnings.str().find("7 non-finite values not drawn"), std::string::npos) << warnings.str();
  EXPECT_TRUE(is_png(png()));
  EXPECT_GT(std::filesystem::file_size(png()), 100000u);  // two 900x300 panels, uncompressed
}

// A step far outside the others (-2.5e9 beside 1000) once drew a line of 2e9 pixels (tens of seconds each); the
// work is now bounded by points x image size, whatever the values.
// This asserts that it returns and draws, not how fast: a hang shows as the ctest timeout.
TEST_F(PlotInput, AbsurdStepsAndValuesFinishAndWriteAPng) {
  append({R"({"step": 0, "loss": 1.0})", R"({"step": 1e18, "loss": 2.0})", R"({"step": 3, "loss": 1.5})",
          R"({"step": -1e18, "loss": 3.0})", R"({"step": 1.7e308, "loss": 1.7e308})",
          R"({"step": -1.7e308, "loss": -1.7e308})", R"({"step": 9223372036854775807, "loss": 5e-324})",
          R"({"step": 18446744073709551615, "accuracy": 1e300})", R"({"step": 4, "accuracy": -1e300})"});
  std::ostringstream warnings;
  const PlotReport report = plot_run(dir_.string(), png(), warnings);
  EXPECT_EQ(report.points, 9u);
  EXPECT_EQ(report.non_finite, 0u);
  EXPECT_EQ(report.skipped_lines, 0u);
  EXPECT_TRUE(is_png(png()));

  std::filesystem::remove(metrics());  // the case that hung: one step far outside the others
  append({R"({"step": 1000, "loss": 1.0})", R"({"step": -2.5e9, "loss": 2.0})", R"({"step": 1000, "loss": 1.0})"});
  EXPECT_EQ(plot_run(dir_.string(), png(), warnings).points, 3u);
  EXPECT_TRUE(is_png(png()));

  // a single point, and all points on one step: a degenerate range on both axes
  std::filesystem::remove(metrics());
  append({R"({"step": 1e18, "loss": 1e18})", R"({"step": 1e18, "loss": 1e18})"});
  EXPECT_EQ(plot_run(dir_.string(), png(), warnings).points, 2u);
  EXPECT_TRUE(is_png(png()));
}

TEST_F(PlotInput, NothingToDrawIsAnErrorNamingTheFile) {
  std::ostringstream warnings;
  EXPECT_NE(error_of(warnings).find(metrics() + ": cannot open metrics"), std::string::npos);  // no file

  append({});  // empty file
  EXPECT_NE(error_of(warnings).find(metrics() + ": no finite training loss"), std::string::npos);

  append({"", "garbage", R"({"loss": 1.0})", R"({"step": 1, "accuracy": 0.5})"});  // nothing but garbage
  std::string error = error_of(warnings);
  EXPECT_NE(error.find(metrics() + ": no finite training loss"), std::string::npos) << error;
  EXPECT_NE(error.find("2 lines skipped"), std::string::npos) << error;

  append({R"({"step": 2, "loss": null})", R"({"step": 3, "loss": NaN})"});  // only non-finite losses
  error = error_of(warnings);
  EXPECT_NE(error.find("2 non-finite losses"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(png()));
}

TEST_F(PlotInput, SkippedLinesPastTenAreCountedNotListed) {
  append({R"({"step": 1, "loss": 1.0})"});
  append(std::vector<std::string>(25, "not json"));
  std::ostringstream warnings;
  EXPECT_EQ(plot_run(dir_.string(), png(), warnings).skipped_lines, 25u);
  const std::string text = warnings.str();
  size_t listed = 0;
  for (size_t at = text.find(": skipped:"); at != std::string::npos; at = text.find(": skipped:", at + 1)) ++listed;
  EXPECT_EQ(listed, 10u);
  EXPECT_NE(text.find("15 more lines skipped"), std::string::npos) << text;
}

TEST_F(PlotInput, SeveralRunsAreOverlaidOneColourPerLabelAndABadRunIsNamed) {
  std::vector<LabelledRun> runs;
  for (int r = 0; r < 3; ++r) {
    const auto run = dir_ / ("seed" + std::to_string(r));
    std::filesystem::create_directories(run);
    MetricsLog log(run.string(), -1);
    for (int s = 1; s <= 10; ++s) log.write({{"step", s}, {"loss", (3.0 + r) / s}});
    log.write({{"step", 10}, {"accuracy", 0.5 + 0.1 * r}});
    runs.push_back(parse_labelled_run((r < 2 ? "fp32=" : "bf16=") + run.string()));
  }
  EXPECT_EQ(runs[0].label, "fp32");
  EXPECT_EQ(runs[2].label, "bf16");
  EXPECT_EQ(runs[2].dir, (dir_ / "seed2").string());
  EXPECT_EQ(parse_labelled_run((dir_ / "seed1/").string()).label, "seed1");

  std::ostringstream warnings;
  const PlotReport report = plot_runs(runs, png(), warnings);
  EXPECT_EQ(report.points, 33u);  // 3 runs x (10 losses + 1 accuracy)
  EXPECT_TRUE(is_png(png()));
  // a legend of two labels (38 rows) above two 900x300 panels, uncompressed RGB rows
  EXPECT_GT(std::filesystem::file_size(png()), (38u + 2 * 300 + 10) * (900 * 3 + 1));

  runs.push_back({"fp16", (dir_ / "missing").string()});
  try {
    plot_runs(runs, png(), warnings);
    ADD_FAILURE() << "a run without metrics was drawn";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "missing" / "metrics.jsonl").string()), std::string::npos)
        << e.what();
  }
}

// `-o RUN/metrics.jsonl` once replaced the metrics with the PNG and said "wrote". An output that is an input (by any
// path to it) or an existing file that is not a PNG is refused by name before anything is read; an earlier PNG is
// replaced.
TEST_F(PlotInput, AnOutputThatIsAnInputOrNotAPngIsRefusedAndKept) {
  append({R"({"step": 1, "loss": 2.0})", R"({"step": 2, "loss": 1.0})"});
  const std::string before = [&] {
    std::ifstream in(metrics());
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }();
  std::ostringstream warnings;
  const std::filesystem::path other = dir_ / "other";
  std::filesystem::create_directories(other);
  std::filesystem::copy_file(metrics(), other / "metrics.jsonl");
  std::ofstream(dir_ / "notes.txt") << "mine";
  std::filesystem::create_symlink(metrics(), dir_ / "link.png");
  struct Case {
    std::string output, says;
  };
  const std::vector<Case> cases = {
      {metrics(), "an input of this plot"},
      {(dir_ / "." / "metrics.jsonl").string(), "an input of this plot"},
      {(dir_ / "link.png").string(), "an input of this plot"},
      {(dir_ / "notes.txt").string(), "exists and is not a PNG"},
      {other.string(), "exists and is not a PNG"},
  };
  for (const Case& c : cases) {
    for (bool several : {false, true}) {
      std::string error;
      try {
        if (several) {
          plot_runs({{"a", dir_.string()}, {"b", other.string()}}, c.output, warnings);
        } else {
          plot_run(dir_.string(), c.output, warnings);
        }
      } catch (const EngineryError& e) {
        error = e.what();
      }
      EXPECT_NE(error.find("enginery plot -o " + c.output + ": "), std::string::npos) << c.output << ": " << error;
      EXPECT_NE(error.find(c.says), std::string::npos) << c.output << ": " << error;
    }
  }
  std::ifstream in(metrics());
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()), before);
  std::ifstream notes(dir_ / "notes.txt");
  std::string text;
  notes >> text;
  EXPECT_EQ(text, "mine");
  EXPECT_TRUE(std::filesystem::is_directory(other));
  // another run's metrics are an input too
  std::string error;
  try {
    plot_runs({{"a", dir_.string()}, {"b", other.string()}}, (other / "metrics.jsonl").string(), warnings);
  } catch (const EngineryError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("an input of this plot"), std::string::npos) << error;

  plot_run(dir_.string(), png(), warnings);
  EXPECT_TRUE(is_png(png()));
  EXPECT_NO_THROW(plot_run(dir_.string(), png(), warnings));  // an earlier PNG is replaced
}

// An argument that names an existing path is a path, even with a '=' in it (runs/lr=1e-3); LABEL=DIR only when it
// is not.
TEST_F(PlotInput, AnExistingPathWithAnEqualsSignIsADirectory) {
  const std::filesystem::path run = dir_ / "lr=1e-3";
  std::filesystem::create_directories(run);
  const LabelledRun parsed = parse_labelled_run(run.string());
  EXPECT_EQ(parsed.label, "lr=1e-3");
  EXPECT_EQ(parsed.dir, run.string());
  const LabelledRun labelled = parse_labelled_run("fast=" + run.string());
  EXPECT_EQ(labelled.label, "fast");
  EXPECT_EQ(labelled.dir, run.string());
}

// More labels than the 8-colour palette: every label's legend swatch has its own colour (runs 1 and 9 once shared
// one), and no two are near each other while that is possible.
TEST_F(PlotInput, EveryLabelGetsItsOwnColourPastEight) {
  constexpr int kRuns = 20;
  std::vector<LabelledRun> runs;
  for (int r = 0; r < kRuns; ++r) {
    const auto run = dir_ / ("run" + std::to_string(r));
    std::filesystem::create_directories(run);
    MetricsLog log(run.string(), -1);
    for (int s = 1; s <= 5; ++s) log.write({{"step", s}, {"loss", (1.0 + r) / s}});
    runs.push_back({"r" + std::to_string(r), run.string()});
  }
  std::ostringstream warnings;
  plot_runs(runs, png(), warnings);
  const DecodedPng image = read_png(png());
  ASSERT_EQ(image.width, 900u);
  std::set<uint32_t> seen;
  std::vector<Rgb> swatches;
  for (int i = 0; i < kRuns; ++i) {
    const Rgb c = image.at(90, 8 + 14 * i + 3);  // the middle of label i's legend line
    seen.insert((uint32_t(c.r) << 16) | (uint32_t(c.g) << 8) | c.b);
    swatches.push_back(c);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kRuns));
  for (int i = 0; i < kRuns; ++i) {
    for (int j = 0; j < i; ++j) {
      const int dr = swatches[i].r - swatches[j].r, dg = swatches[i].g - swatches[j].g, db = swatches[i].b - swatches[j].b;
      EXPECT_GE(dr * dr + dg * dg + db * db, 50 * 50) << "labels " << j << " and " << i;
    }
  }
}

}  // namespace
}  // namespace enginery
