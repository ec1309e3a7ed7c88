#pragma once
// `enginery plot`: training loss and held-out accuracy (or validation loss) from <dir>/metrics.jsonl, drawn to PNG.
#include <string>

namespace enginery {

// Reads <run_dir>/metrics.jsonl and writes `png_path`. Throws EngineryError when there is nothing to draw.
void plot_run(const std::string& run_dir, const std::string& png_path);

}  // namespace enginery
