// `enginery plot <output dir> [-o file.png]`: loss and accuracy of a training run as a PNG.
#include <filesystem>
#include <iostream>

#include "trainer/command.h"
#include "trainer/plot.h"

namespace enginery {
namespace {

CommandRegistration plot_registration(
    "plot", "Draw a run's loss and held-out accuracy (from metrics.jsonl) to a PNG",
    [](CLI::App& sub) -> std::function<int()> {
      auto dir = std::make_shared<std::string>();
      auto output = std::make_shared<std::string>();
      sub.add_option("dir", *dir, "Output directory of enginery train (holds metrics.jsonl)")->required();
      sub.add_option("-o,--output", *output, "PNG to write (default: <dir>/metrics.png)");
      return [dir, output] {
        const std::string png = output->empty() ? (std::filesystem::path(*dir) / "metrics.png").string() : *output;
        plot_run(*dir, png);
        std::cout << "wrote " << png << std::endl;
        return 0;
      };
    });

}  // namespace
}  // namespace enginery
