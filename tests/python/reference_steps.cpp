// The C++ side of test_parity.py: the engine, batch and SFT loss the test drives from Python, run through the
// host's own calls (train_batch, trainer/loop/losses.h), each step's loss, grad norm and lr printed exactly
// (C's %a), then a checkpoint whose model and optimizer files the test compares byte for byte.
//
//   python_reference_steps <plugin_dir> <checkpoint_dir> <steps> key=value...   (keys as in the config TOML)
//
// The batch is parity_batch() below; test_parity.py builds the same one with the same integer formula.
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "host_api/error.h"
#include "registry/plugin_loader.h"
#include "trainer/loop/losses.h"
#include "config/train_config.h"
#include "engine_driver/step_loop.h"

namespace {

using namespace enginery;

// 4 rows of 16 tokens; row 1 ends in 4 padding tokens. Everything but position 0 and the padding is a target.
Batch parity_batch() {
  const int64_t rows = 4;
  const int64_t length = 16;
  const auto ids = (torch::arange(rows, torch::kLong).unsqueeze(1) * 7 +
                    torch::arange(length, torch::kLong).unsqueeze(0) * 3 + 1)
                       .remainder(256);
  auto attention = torch::ones({rows, length}, torch::kLong);
  attention.index_put_({1, torch::indexing::Slice(12, torch::indexing::None)}, 0);
  auto loss_mask = attention.to(torch::kFloat);
  loss_mask.index_put_({torch::indexing::Slice(), 0}, 0.0);
  Batch batch;
  batch.set("input_ids", ids);
  batch.set("attention_mask", attention);
  batch.set("loss_mask", loss_mask);
  return batch;
}

int run(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: python_reference_steps <plugin_dir> <checkpoint_dir> <steps> key=value...\n";
    return 2;
  }
  EngineRegistry registry;
  const PluginLoadReport report =
      PluginLoader(PluginLoader::search_path({argv[1]}, "argv", nullptr, {})).load(registry);
  for (const auto& rejected : report.rejected) std::cerr << rejected.path << ": " << rejected.reason << "\n";
  if (!report.ok()) return 1;
  const TrainConfig config = train_config_from_overrides({argv + 4, argv + argc}, "reference");
  EngineArgs args;
  args.model = config.model;
  args.engine = config.engine;
  args.optim = config.optim;
  args.checkpoint = config.checkpoint;
  auto engine = registry.create("language_model", config.engine.strategy, "cpu", args);
  engine->initialize();
  const Batch batch = parity_batch();
  const int64_t steps = std::atoll(argv[3]);
  for (int64_t step = 1; step <= steps; ++step) {
    const BatchOutput out = train_batch(*engine, batch, sft_loss);
    std::printf("%a %a %a\n", out.loss.item<double>(), out.grad_norm.item<double>(), out.lr);
  }
  engine->save_checkpoint(argv[2], steps, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
