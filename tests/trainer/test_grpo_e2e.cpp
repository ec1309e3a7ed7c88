// GRPO through the real `enginery` executable and the fsdp plugin on 2 CPU ranks: a run is a function of its seed,
// and a few steps raise the reward on a toy task (1-digit addition after a short SFT warm-up). Both need
// models::generate and BaseEngine::export_weights.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/torch_compat.h"  // compat::remove_all
#include "tests/support/shell_command.h"

namespace fs = std::filesystem;

namespace {

using enginery::test_support::CommandResult;

CommandResult run_train(const std::string& args) {
  const std::string cmd = std::string(ENGINERY_EXE) + " train " + args + " --plugin-dir " + ENGINERY_PLUGIN_DIR +
                          " 2>&1";
  return enginery::test_support::run_shell(cmd);
}

// The step lines of metrics.jsonl (evaluation lines carry "accuracy" instead).
std::vector<nlohmann::json> step_lines(const fs::path& dir) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("accuracy")) lines.push_back(std::move(j));
  }
  return lines;
}

// Everything a run computes, without what depends on the machine's speed.
nlohmann::json without_timing(nlohmann::json line) {
  for (const char* key : {"tokens_per_s", "step_time_s"}) line.erase(key);
  for (auto it = line.begin(); it != line.end();) {
    it = it.key().rfind("timing_s/", 0) == 0 ? line.erase(it) : std::next(it);
  }
  return line;
}

class GrpoEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("enginery_grpo_e2e_" + std::to_string(getpid()));
    enginery::compat::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) enginery::compat::remove_all(dir_);
  }
  static std::string example(const char* name) { return std::string(ENGINERY_SOURCE_DIR) + "/examples/" + name; }
  // examples/grpo.toml cut down to 1-digit addition (answers: 2 digits + <eos>) and small batches.
  static std::string grpo(const fs::path& out, const std::string& model, int steps) {
    return "--config " + example("grpo.toml") + " --nproc 2 --set trainer.default_local_dir=" + out.string() +
           " --set model.path=" + model + " --set data.digits=1 --set trainer.total_training_steps=" +
           std::to_string(steps) + " --set trainer.test_freq=-1 --set trainer.log_freq=1" +
           " --set data.train_batch_size=16 --set actor_rollout_ref.actor.ppo_mini_batch_size=8" +
           " --set actor_rollout_ref.rollout.response_length=3 --set engine.micro_batch_size_per_gpu=32";
  }
  fs::path dir_;
};

// Sampling seeds come from data.seed, the rank and the step, and every reduction is fixed, so two runs of the same
// config write the same metrics. From random weights the rewards are all 0; entropy_coeff keeps the update non-zero
// so the second and third steps depend on the first one's update. A third run keeps the engine's state on the host
// outside the mode contexts (engine.fsdp.offload_outside_modes: on CPU every move is a copy into fresh storage) and
// must write the same metrics too.
TEST_F(GrpoEndToEnd, TwoRankRunIsDeterministicFromItsSeed) {
  std::vector<std::vector<nlohmann::json>> runs;
  for (const char* name : {"a", "b", "offloaded"}) {
    const fs::path out = dir_ / name;
    const std::string offload = name == std::string("offloaded") ? " --set engine.fsdp.offload_outside_modes=true" : "";
    CommandResult r = run_train(grpo(out, "builtin:qwen2-tiny", 3) +
                                " --set actor_rollout_ref.actor.entropy_coeff=0.01" + offload);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("[rank 0] step 3/3 | score"), std::string::npos) << r.output;
    runs.push_back(step_lines(out));
  }
  for (const auto& run : runs) ASSERT_EQ(run.size(), 3u);
  for (const char* key : {"critic/score/mean", "critic/advantages/mean", "response_length/mean", "actor/pg_clipfrac",
                          "actor/ppo_kl", "actor/entropy", "actor/kl_loss", "actor/grad_norm", "actor/lr",
                          "timing_s/gen", "timing_s/update_actor", "timing_s/old_log_prob", "timing_s/ref"}) {
    EXPECT_TRUE(runs[0][0].contains(key)) << key << " missing from " << runs[0][0];
  }
  EXPECT_GT(runs[0][0]["actor/grad_norm"].get<double>(), 0.0);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(without_timing(runs[0][i]), without_timing(runs[1][i])) << "step " << i + 1;
    EXPECT_EQ(without_timing(runs[0][i]), without_timing(runs[2][i])) << "offloaded, step " << i + 1;
  }
}

// Rollout settings that cannot run stop `enginery train` before any rank starts (exit 2, nothing launched), named
// as `enginery generate` names its flags' problems; an RL key under the SFT loss likewise.
TEST_F(GrpoEndToEnd, RolloutSettingsThatCannotRunAreRefusedBeforeLaunch) {
  CommandResult longer = run_train(grpo(dir_ / "long", "builtin:qwen2-tiny", 1) +
                                   " --set actor_rollout_ref.rollout.response_length=100000");
  EXPECT_EQ(longer.status, 2) << longer.output;
  EXPECT_NE(longer.output.find("--set actor_rollout_ref.rollout.response_length=100000: rollout.response_length = "
                               "100000 after a prompt of 5 tokens (builtin:addition (1 digits, 100000 training "
                               "examples of 8 tokens)) exceeds max_position_embeddings = 2048 of model.path = "
                               "builtin:qwen2-tiny (allowed: 1..2043)"),
            std::string::npos)
      << longer.output;
  EXPECT_EQ(longer.output.find("launching"), std::string::npos) << longer.output;

  CommandResult sft = run_train("--config " + example("demo.toml") + " --set actor_rollout_ref.rollout.n=4");
  EXPECT_EQ(sft.status, 2) << sft.output;
  EXPECT_NE(sft.output.find("rollout.n is read only by algorithm.adv_estimator = \"grpo\""), std::string::npos)
      << sft.output;
}

// A short SFT warm-up on 1-digit addition leaves the policy right on some answer tokens; GRPO's reward (the
// fraction of answer tokens in place) then rises. Measured once with a stand-in sampler (not models::generate):
// 0.62 -> 0.65 over 16 steps at this lr; sizes are for CPU seconds, not tuned for a margin.
TEST_F(GrpoEndToEnd, FewStepsRaiseTheRewardOnAToyTask) {
  const fs::path sft = dir_ / "sft";
  const int warmup = 80;
  CommandResult warm = run_train(
      "--config " + example("demo.toml") + " --nproc 2 --set trainer.default_local_dir=" + sft.string() +
      " --set data.digits=1 --set trainer.total_training_steps=" + std::to_string(warmup) +
      " --set trainer.save_freq=" + std::to_string(warmup) + " --set trainer.test_freq=-1 --set trainer.log_freq=10" +
      " --set data.train_batch_size=64 --set engine.micro_batch_size_per_gpu=32 --set optim.lr_warmup_steps=5" +
      " --set 'checkpoint.save_contents=[\"model\",\"optimizer\",\"extra\",\"hf_model\"]'");
  ASSERT_EQ(warm.status, 0) << warm.output;
  const fs::path hf = sft / ("global_step_" + std::to_string(warmup)) / "actor" / "huggingface";
  ASSERT_TRUE(fs::exists(hf / "config.json")) << warm.output;

  const fs::path out = dir_ / "grpo";
  const int steps = 20;
  CommandResult rl = run_train(grpo(out, hf.string(), steps) + " --set optim.lr=1e-4");
  ASSERT_EQ(rl.status, 0) << rl.output;
  const auto lines = step_lines(out);
  ASSERT_EQ(lines.size(), static_cast<size_t>(steps));
  // Every step samples other prompts, so single steps are noisy: compare the first and last five.
  double first = 0, last = 0;
  for (size_t i = 0; i < 5; ++i) {
    first += lines[i]["critic/score/mean"].get<double>() / 5;
    last += lines[lines.size() - 5 + i]["critic/score/mean"].get<double>() / 5;
  }
  EXPECT_GT(first, 0.0) << "the warm-up gets no answer token right: every group's advantages are 0";
  EXPECT_GT(last, first) << "reward " << first << " -> " << last << "\n" << rl.output;
}

}  // namespace
