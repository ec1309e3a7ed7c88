#pragma once
// Shared pieces of the checkpoint tests: the full (unsharded) optimizer state of an engine, bitwise comparisons of
// full states, and one deterministic training step that the kill test's saver program and its reference share.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "plugin/fsdp/fsdp_engine.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {

using TensorMap = std::map<std::string, torch::Tensor>;

// Full AdamW moments by Hugging Face name (collective over the engine's shard group), gathered independently of
// the checkpoint code: all-gather each unit's shard and unpack it with the unit's layout.
inline TensorMap full_optimizer_state(fsdp::FSDPEngine& engine) {
  std::map<const void*, std::string> hf_names;
  for (const auto& item : engine.model()->named_parameters()) hf_names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  TensorMap out;
  auto& units = engine.fsdp_module()->units();
  const auto& shard_group = *engine.fsdp_module()->groups().shard;
  for (size_t u = 0; u < units.size(); ++u) {
    const auto& layout = units[u].layout();
    for (auto* moments : {&engine.optimizer()->exp_avg(), &engine.optimizer()->exp_avg_sq()}) {
      const std::string kind = moments == &engine.optimizer()->exp_avg() ? "exp_avg:" : "exp_avg_sq:";
      auto gathered = torch::empty({layout.world() * layout.shard_numel()}, torch::kFloat);
      shard_group.all_gather_into(gathered, (*moments)[u]);
      auto full = layout.unpack(gathered);
      for (size_t i = 0; i < full.size(); ++i) {
        out[kind + hf_names.at(units[u].params()[i].unsafeGetTensorImpl())] = full[i].clone();
      }
    }
  }
  return out;
}

// Parameters and optimizer moments, by name.
inline TensorMap full_state(fsdp::FSDPEngine& engine) {
  TensorMap state = full_optimizer_state(engine);
  for (auto& [name, t] : engine_params(engine)) state["param:" + name] = t;
  return state;
}

inline void expect_bitwise_equal(const TensorMap& got, const TensorMap& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, t] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no " << name;
    EXPECT_TRUE(torch::equal(it->second, t)) << what << ": " << name << " differs by "
                                            << (it->second - t).abs().max().item<double>();
  }
}

inline void expect_near(const TensorMap& got, const TensorMap& want, double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, t] : want) {
    const double diff = (got.at(name).to(torch::kDouble) - t.to(torch::kDouble)).abs().max().item<double>();
    EXPECT_LE(diff, atol) << what << ": " << name;
  }
}

// The kill test's training: a single-rank fp32 engine, one fixed batch per step.
inline EngineArgs saver_args() {
  auto args = make_args("fsdp2", "fp32");
  args.engine.grad_scaler.enabled = ScalerMode::kAlways;
  args.optim.lr_scheduler_type = "cosine";
  args.optim.lr_warmup_steps = 2;
  args.optim.total_training_steps = 20;
  return args;
}

inline void saver_step(fsdp::FSDPEngine& engine, int64_t step) {
  train_batch(engine, make_batch(4, 8, 64, 500 + static_cast<uint64_t>(step)), sft_loss);
}

}  // namespace fsdp_test
}  // namespace enginery
