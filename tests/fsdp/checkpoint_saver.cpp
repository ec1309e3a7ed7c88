// The kill test's victim: trains the checkpoint tests' single-rank model and saves <dir>/global_step_<k> after
// every step k (max_ckpt_to_keep 2) until `steps`, or until it is killed.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "tests/fsdp/checkpoint_test_util.h"

int main(int argc, char** argv) {
  using namespace enginery;
  if (argc != 3) {
    std::cerr << "usage: checkpoint_saver <dir> <steps>\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const int64_t steps = std::atoll(argv[2]);
  try {
    fsdp::FSDPEngine engine(fsdp_test::saver_args(), fsdp_test::tiny_builder(fsdp_test::TinyConfig{}));
    engine.initialize();
    for (int64_t k = 1; k <= steps; ++k) {
      fsdp_test::saver_step(engine, k);
      engine.save_checkpoint((dir / ("global_step_" + std::to_string(k))).string(), k, 2);
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
