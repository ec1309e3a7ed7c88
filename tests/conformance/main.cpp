// enginery_conformance_tests: the ctest front end of the conformance suite.
//   enginery_conformance_tests --plugin-dir D [--backend B] [--model-type M] [--device cpu|cuda] [--model P]
//                              [--check GLOB] [--list] [--gtest_*...]
//   enginery_conformance_tests --rank-worker SPEC   (started by the suite itself for the multi-rank check)
#include <iostream>
#include <string>

#include "conformance/conformance.h"
#include "conformance/rank_worker.h"
#include "launch/spawn.h"

int main(int argc, char** argv) {
  using namespace enginery::conformance;
  SuiteOptions options;
  options.self_command = {enginery::self_executable()};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << arg << " needs a value" << std::endl;
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == kRankWorkerFlag) return run_rank_worker(value());
    if (arg == "--plugin-dir") options.plugin_dir = value();
    else if (arg == "--backend") options.backend = value();
    else if (arg == "--model-type") options.model_type = value();
    else if (arg == "--device") options.device = value();
    else if (arg == "--model") options.model_path = value();
    else if (arg == "--check") options.check_filter = value();
    else if (arg == "--list") options.list_only = true;
    else if (arg.rfind("--gtest_", 0) == 0) options.gtest_args.push_back(arg);
    else {
      std::cerr << "unknown argument '" << arg << "' (allowed: --plugin-dir, --backend, --model-type, --device, "
                << "--model, --check, --list, --gtest_*)" << std::endl;
      return 2;
    }
  }
  return run_suite(options);
}
