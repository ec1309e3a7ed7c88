// `enginery plot <output dir> [-o file.png]`: loss and accuracy of a training run as a PNG; with several
// directories (each optionally LABEL=DIR), the runs overlaid, one colour per label (seed and dtype sweeps). The
// output never replaces an input or a file that is not a PNG (trainer/plotting/plot.h).
#include <filesystem>
#include <iostream>

#include "host_api/error.h"
#include "trainer/command.h"
#include "trainer/plotting/plot.h"

namespace enginery {
namespace {

CommandRegistration plot_registration(
    "plot", "Draw a run's loss and held-out accuracy (from metrics.jsonl) to a PNG, or several runs overlaid",
    [](CLI::App& sub) -> std::function<int()> {
      auto dirs = std::make_shared<std::vector<std::string>>();
      auto output = std::make_shared<std::string>();
      sub.add_option("dirs", *dirs,
                     "Output directories of enginery train (hold metrics.jsonl), each DIR or LABEL=DIR (runs sharing "
                     "a label share a colour). An argument that names an existing path is always a DIR, labelled "
                     "with its own name (runs/lr=1e-3 is that directory); LABEL=DIR only when it is not")
          ->required();
      sub.add_option("-o,--output", *output,
                     "PNG to write (default: <dir>/metrics.png; required for several). An existing file is replaced "
                     "only when it is a PNG and not an input");
      return [dirs, output] {
        if (dirs->size() > 1 && output->empty()) {
          throw EngineryError("several runs need an output file", "enginery plot -o", "a .png path");
        }
        const LabelledRun first = parse_labelled_run(dirs->front());
        const std::string png = output->empty() ? (std::filesystem::path(first.dir) / "metrics.png").string() : *output;
        if (dirs->size() == 1) {
          plot_run(first.dir, png);
        } else {
          std::vector<LabelledRun> runs;
          for (const auto& d : *dirs) runs.push_back(parse_labelled_run(d));
          plot_runs(runs, png, std::cerr);
        }
        std::cout << "wrote " << png << std::endl;
        return 0;
      };
    });

}  // namespace
}  // namespace enginery
