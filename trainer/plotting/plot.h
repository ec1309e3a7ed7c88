#pragma once
// `enginery plot`: training loss and held-out accuracy (or validation loss) from <dir>/metrics.jsonl, drawn to PNG.
#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

namespace enginery {

// What a plot left out. A run that diverged writes its NaN loss as `null`, and hand-edited or cut-short files
// may hold anything: such values and lines are skipped and counted, never fatal.
struct PlotReport {
  size_t points = 0;         // values drawn
  size_t non_finite = 0;     // values present but null, NaN, inf or not a number
  size_t skipped_lines = 0;  // lines that are not a JSON object with a finite numeric "step"
};

// Reads <run_dir>/metrics.jsonl and writes `png_path`; each skipped line and the counts above are reported on
// `warnings` (std::cerr in the first form). Throws EngineryError naming the file when there is no finite
// training loss to draw, and before reading anything when `png_path` exists and is an input of the plot or not a
// PNG (a file enginery did not write). The work is bounded by the number of lines and the image size, whatever the
// values.
PlotReport plot_run(const std::string& run_dir, const std::string& png_path);
PlotReport plot_run(const std::string& run_dir, const std::string& png_path, std::ostream& warnings);

// Several runs overlaid in one PNG (a seed or dtype sweep): one colour per label, a different one for every label
// however many, and a legend of the labels. Each run is read and checked as plot_run reads it, the output as
// plot_run checks it; the report sums over the runs.
struct LabelledRun {
  std::string label;
  std::string dir;
};
PlotReport plot_runs(const std::vector<LabelledRun>& runs, const std::string& png_path, std::ostream& warnings);
// An argument that names an existing path is a DIR, labelled with its own name ("runs/lr=1e-3" -> {"lr=1e-3",
// "runs/lr=1e-3"}); otherwise "LABEL=DIR" -> {LABEL, DIR}, and anything else a DIR as well.
LabelledRun parse_labelled_run(const std::string& arg);

}  // namespace enginery
