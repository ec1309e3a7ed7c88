// `enginery train` end to end through the real executable and the fsdp plugin: a shortened demo on 2 ranks,
// resume, plot, and config errors that must stop before any rank starts.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include "support/torch_compat.h"  // compat::remove_all

namespace fs = std::filesystem;

namespace {

struct CommandResult {
  int status = -1;
  std::string output;
  double seconds = 0;
};

CommandResult run(const std::string& args) {
  const auto start = std::chrono::steady_clock::now();
  const std::string cmd = std::string(ENGINERY_EXE) + " " + args + " --plugin-dir " + ENGINERY_PLUGIN_DIR + " 2>&1";
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string run_plot(const std::string& dir) {
  const std::string cmd = std::string(ENGINERY_EXE) + " plot " + dir + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  char buffer[4096];
  std::string out;
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << out;
  return out;
}

std::vector<nlohmann::json> read_metrics(const fs::path& dir) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

class TrainEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("enginery_train_e2e_" + std::to_string(getpid()));
    enginery::compat::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) enginery::compat::remove_all(dir_);
  }
  std::string demo() const { return std::string(ENGINERY_SOURCE_DIR) + "/examples/demo.toml"; }
  fs::path dir_;
};

TEST_F(TrainEndToEnd, ShortDemoOnTwoRanksLearnsResumesAndPlots) {
  const fs::path out = dir_ / "run";
  const std::string common = "train --config " + demo() + " --nproc 2 --set trainer.default_local_dir=" +
                             out.string() + " --set data.val_size=32 --set trainer.log_freq=10 " +
                             "--set trainer.test_freq=20 --set trainer.save_freq=20 --set optim.lr_warmup_steps=5";
  CommandResult first = run(common + " --set trainer.total_training_steps=40");
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("[rank 0] step 40/40"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("exact match"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("| held-out exact match"), std::string::npos) << first.output;  // summary table
  ASSERT_TRUE(fs::exists(out / "config.toml"));
  ASSERT_TRUE(fs::exists(out / "global_step_40" / "trainer_state.json"));
  ASSERT_TRUE(fs::exists(out / "summary.txt"));

  auto lines = read_metrics(out);
  std::vector<double> losses;
  int evals = 0;
  for (const auto& l : lines) {
    if (l.contains("accuracy")) {
      ++evals;
      EXPECT_GE(l["accuracy"].get<double>(), 0.0);
      EXPECT_EQ(l["total"].get<int64_t>(), 32);
      continue;
    }
    for (const char* key : {"step", "loss", "grad_norm", "lr", "tokens_per_s"}) EXPECT_TRUE(l.contains(key)) << l;
    EXPECT_EQ(l["step"].get<int64_t>(), static_cast<int64_t>(losses.size()) + 1);
    EXPECT_GT(l["tokens_per_s"].get<double>(), 0.0);
    losses.push_back(l["loss"].get<double>());
  }
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_EQ(evals, 3);  // before training, at 20 and at 40
  double head = 0, tail = 0;
  for (int i = 0; i < 5; ++i) head += losses[i], tail += losses[35 + i];
  EXPECT_LT(tail, 0.8 * head) << "loss did not go down: " << head / 5 << " -> " << tail / 5;

  // --resume continues from the newest complete checkpoint, with the data position it saved.
  CommandResult resumed = run(common + " --set trainer.total_training_steps=50 --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_EQ(resumed.output.find("step  1/50"), std::string::npos) << resumed.output;
  auto after = read_metrics(out);
  std::vector<int64_t> steps;
  for (const auto& l : after) {
    if (!l.contains("accuracy")) steps.push_back(l["step"].get<int64_t>());
  }
  ASSERT_EQ(steps.size(), 50u);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<int64_t>(i) + 1);
  EXPECT_LT(after[after.size() - 2]["loss"].get<double>(), head / 5);  // continued, not restarted

  run_plot(out.string());
  EXPECT_GT(fs::file_size(out / "metrics.png"), 1000u);
}

TEST_F(TrainEndToEnd, ConfigErrorsStopBeforeAnyRankStarts) {
  const fs::path bad = dir_ / "bad.toml";
  std::ofstream(bad) << "[trainer]\ntotal_training_steps = 5\nbogus_key = 1\n";
  CommandResult unknown = run("train --config " + bad.string() + " --nproc 2");
  EXPECT_EQ(unknown.status, 2) << unknown.output;
  EXPECT_NE(unknown.output.find(bad.string() + ":3:1: unknown key 'trainer.bogus_key'"), std::string::npos)
      << unknown.output;
  EXPECT_EQ(unknown.output.find("[rank"), std::string::npos) << unknown.output;

  CommandResult type = run("train --config " + demo() + " --nproc 2 --set data.train_batch_size=1.5");
  EXPECT_EQ(type.status, 2);
  EXPECT_NE(type.output.find("--set data.train_batch_size=1.5: data.train_batch_size: expected an integer"),
            std::string::npos)
      << type.output;

  CommandResult dtype = run("train --config " + demo() + " --set engine.mixed_precision.param_dtype=fp8");
  EXPECT_EQ(dtype.status, 2);
  EXPECT_NE(dtype.output.find("unexpected precision: fp8"), std::string::npos) << dtype.output;

  CommandResult backend = run("train --config " + demo() + " --nproc 2 --set engine.strategy=nope");
  EXPECT_EQ(backend.status, 2) << backend.output;
  EXPECT_NE(backend.output.find("--set engine.strategy=nope: engine.strategy = 'nope'"), std::string::npos)
      << backend.output;
  EXPECT_NE(backend.output.find("fsdp"), std::string::npos) << backend.output;  // what is registered
  EXPECT_EQ(backend.output.find("[rank"), std::string::npos) << backend.output;

  // Keys the engine does not implement are refused by name, where they were set, before any rank starts.
  std::vector<CommandResult> refused;
  for (const std::string key : {"engine.param_offload=true", "engine.optimizer_offload=true",
                                "engine.forward_prefetch=true", "checkpoint.async_save=true",
                                "engine.entropy_from_logits_with_chunking=false", "engine.model_dtype=bf16"}) {
    refused.push_back(run("train --config " + demo() + " --nproc 2 --set " + key));
    const CommandResult& r = refused.back();
    const std::string name = key.substr(0, key.find('='));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--set " + key + ": " + name + " = "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("is not implemented by engine (language_model, fsdp, cpu)"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("(allowed: "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("[rank"), std::string::npos) << r.output;
  }

  CommandResult batch = run("train --config " + demo() + " --nproc 3");
  EXPECT_EQ(batch.status, 2);
  EXPECT_NE(batch.output.find("does not divide over 3 ranks"), std::string::npos) << batch.output;
  for (const CommandResult* r : {&unknown, &type, &dtype, &backend, &batch}) EXPECT_LT(r->seconds, 20.0);
  for (const CommandResult& r : refused) EXPECT_LT(r.seconds, 20.0);
}

}  // namespace
