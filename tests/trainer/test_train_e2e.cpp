// `enginery train` end to end through the real executable and the fsdp plugin: a shortened demo on 2 ranks,
// resume, plot, and config errors that must stop before any rank starts.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <csignal>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support/torch_compat.h"  // compat::remove_all
#include "tests/support/shell_command.h"

namespace fs = std::filesystem;

namespace {

using enginery::test_support::CommandResult;

// `enginery <args>` (output and error together) through the shell; `shell_prefix` goes before the executable
// (limits, traps).
CommandResult run_enginery(const std::string& args, const std::string& shell_prefix = "") {
  return enginery::test_support::run_shell(shell_prefix + std::string(ENGINERY_EXE) + " " + args + " 2>&1");
}

CommandResult run(const std::string& args, const std::string& shell_prefix = "") {
  return run_enginery(args + " --plugin-dir " + ENGINERY_PLUGIN_DIR, shell_prefix);
}

std::string run_plot(const std::string& dir) {
  const CommandResult r = run_enginery("plot " + dir);
  EXPECT_EQ(r.status, 0) << r.output;
  return r.output;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
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
  // The demo cut down to seconds: one rank, small batches, no evaluation, no checkpoints unless asked.
  std::string tiny(const fs::path& out, int nproc = 1) const {
    return "train --config " + demo() + " --nproc " + std::to_string(nproc) + " --set trainer.default_local_dir=" +
           out.string() + " --set data.train_batch_size=8 --set engine.micro_batch_size_per_gpu=4 " +
           "--set trainer.test_freq=-1 --set trainer.save_freq=-1 --set trainer.log_freq=1000";
  }
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
  for (const std::string key : {"engine.forward_prefetch=true", "checkpoint.async_save=true",
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

// A second run in a used output directory is refused before any rank starts, leaving it byte for byte; with
// --fresh-run the old run is moved whole to <dir>.old-<time>.
TEST_F(TrainEndToEnd, AUsedRunDirectoryIsRefusedOrMovedAsideNeverOverwritten) {
  const fs::path out = dir_ / "used";
  CommandResult first = run(tiny(out) + " --set trainer.total_training_steps=3 --set trainer.save_freq=3");
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string metrics = read_file(out / "metrics.jsonl");
  ASSERT_FALSE(metrics.empty());

  CommandResult again = run(tiny(out) + " --set trainer.total_training_steps=3");
  EXPECT_EQ(again.status, 2) << again.output;
  EXPECT_NE(again.output.find(out.string() + ": already holds a run (global_step_3, "
                                              "latest_checkpointed_iteration.txt, metrics.jsonl)"),
            std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("--fresh-run"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("[rank"), std::string::npos) << again.output;
  EXPECT_EQ(read_file(out / "metrics.jsonl"), metrics);

  CommandResult fresh = run(tiny(out) + " --set trainer.total_training_steps=2 --fresh-run");
  ASSERT_EQ(fresh.status, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("moved the previous run in " + out.string() + " to " + out.string() + ".old-"),
            std::string::npos)
      << fresh.output;
  int moved = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    if (entry.path().filename().string().rfind("used.old-", 0) != 0) continue;
    ++moved;
    EXPECT_EQ(read_file(entry.path() / "metrics.jsonl"), metrics);
    EXPECT_TRUE(fs::exists(entry.path() / "global_step_3" / "trainer_state.json"));
  }
  EXPECT_EQ(moved, 1);
  EXPECT_EQ(read_metrics(out).size(), 2u);
  EXPECT_FALSE(fs::exists(out / "global_step_3"));

  CommandResult help = run_enginery("train --help");
  EXPECT_NE(help.output.find("--fresh-run"), std::string::npos) << help.output;
}

// --resume names a checkpoint whose trainer_state.json it cannot read instead of skipping it, and nothing
// deletes it.
TEST_F(TrainEndToEnd, AnUnreadableCheckpointIsNamedOnResumeAndKept) {
  const fs::path out = dir_ / "corrupt";
  const std::string common = tiny(out) + " --set trainer.save_freq=2 --set trainer.max_ckpt_to_keep=1";
  CommandResult first = run(common + " --set trainer.total_training_steps=4");
  ASSERT_EQ(first.status, 0) << first.output;
  std::ofstream(out / "global_step_4" / "trainer_state.json", std::ios::trunc) << "{\"global_step\": 4,";
  CommandResult resumed = run(common + " --set trainer.total_training_steps=6 --resume");
  EXPECT_EQ(resumed.status, 2) << resumed.output;
  EXPECT_NE(resumed.output.find("checkpoint " + (out / "global_step_4").string() +
                                " cannot be resumed: trainer_state.json is unreadable"),
            std::string::npos)
      << resumed.output;
  EXPECT_TRUE(fs::exists(out / "global_step_4" / "actor"));
  EXPECT_EQ(read_metrics(out).size(), 4u);
}

// A write the run depends on that fails (a file size limit, a full disk) fails the run naming the file, instead
// of exiting 0 with metrics cut short.
TEST_F(TrainEndToEnd, AFailedWriteFailsTheRunNamingTheFile) {
  const fs::path limited = dir_ / "fsize";
  // 24 blocks of 512 bytes: config.toml fits, metrics.jsonl reaches the limit after some 50 steps. SIGXFSZ is
  // ignored, so the write returns EFBIG, as root too.
  CommandResult big = run(tiny(limited) + " --set trainer.total_training_steps=400", "trap '' XFSZ; ulimit -f 24; ");
  EXPECT_NE(big.status, 0) << big.output;
  EXPECT_NE(big.output.find((limited / "metrics.jsonl").string() + ": cannot write: File too large"),
            std::string::npos)
      << big.output;

  const fs::path full = dir_ / "full";
  fs::create_directories(full);
  fs::create_symlink("/dev/full", full / "summary.txt");
  CommandResult summary = run(tiny(full) + " --set trainer.total_training_steps=2");
  EXPECT_NE(summary.status, 0) << summary.output;
  EXPECT_NE(summary.output.find((full / "summary.txt").string() + ": write failed: No space left on device"),
            std::string::npos)
      << summary.output;
}

// Data that does not fit the model is refused before any rank starts (before any model runs), naming the file and
// what does not fit.
TEST_F(TrainEndToEnd, DataThatDoesNotFitTheModelIsRefusedByName) {
  const fs::path data = dir_ / "bad.jsonl";
  std::ofstream(data) << "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1, 999999, 3]}\n";
  // The demo without its built-in task's knobs, which are refused beside data from files.
  const fs::path demo_for_files = dir_ / "demo_for_files.toml";
  {
    std::ifstream in(demo());
    std::ofstream out(demo_for_files);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("digits", 0) != 0 && line.rfind("val_size", 0) != 0) out << line << "\n";
    }
  }
  std::string args = tiny(dir_ / "tokens");
  args.replace(args.find(demo()), demo().size(), demo_for_files.string());
  CommandResult r = run(args + " --set data.train_files=" + data.string() +
                        " --set data.train_batch_size=1 --set engine.micro_batch_size_per_gpu=1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(data.string() + ":2: input_ids: token id 999999 is outside the vocabulary of"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("index out of range"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank"), std::string::npos) << r.output;

  // `enginery logprobs`: a sequence longer than the model's positions is refused before it is scored, and a
  // FIFO given as the token file is refused without blocking.
  const fs::path tokens = dir_ / "long.json";
  std::string row = "1";
  for (int i = 1; i < 3000; ++i) row += ", 1";
  std::ofstream(tokens) << "[[1, 2, 3], [" << row << "]]";
  CommandResult long_row = run_enginery("logprobs --model builtin:qwen2-tiny --tokens " + tokens.string() +
                                        " --out " + (dir_ / "lp.json").string());
  EXPECT_NE(long_row.status, 0) << long_row.output;
  EXPECT_NE(long_row.output.find(tokens.string() + ": [1]: a sequence of 3000 tokens is longer than the model's "
                                                   "max_position_embeddings = 2048"),
            std::string::npos)
      << long_row.output;
  const fs::path fifo = dir_ / "tokens.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  CommandResult blocked = run_enginery("logprobs --model builtin:qwen2-tiny --tokens " + fifo.string() + " --out " +
                                       (dir_ / "lp.json").string());
  EXPECT_NE(blocked.status, 0) << blocked.output;
  EXPECT_NE(blocked.output.find(fifo.string() + ": not a regular file"), std::string::npos) << blocked.output;
  EXPECT_LT(blocked.seconds, 20.0);
}

// A rank that stops (SIGSTOP) mid-run: the other fails within trainer.collective_timeout_s, naming itself, the
// step it was in and the setting; the stopped rank is killed by the test. The two ranks are started as torchrun
// would start them, so the test can stop one.
TEST_F(TrainEndToEnd, AStoppedPeerFailsTheOtherRankWithinTheCollectiveTimeout) {
  const fs::path out = dir_ / "stopped";
  const std::string port = std::to_string(20000 + getpid() % 20000);
  const std::string args = tiny(out) + " --set trainer.total_training_steps=100000 --set trainer.log_freq=1 " +
                           "--set trainer.collective_timeout_s=5 --set trainer.device=cpu --plugin-dir " +
                           ENGINERY_PLUGIN_DIR + " 2>&1";
  auto start_rank = [&](int rank) {
    const std::string cmd = "echo $$; RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" +
                            std::to_string(rank) + " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port +
                            " OMP_NUM_THREADS=1 exec " + ENGINERY_EXE + " " + args;
    return popen(cmd.c_str(), "r");
  };
  FILE* rank0 = start_rank(0);
  FILE* rank1 = start_rank(1);
  ASSERT_TRUE(rank0 && rank1);
  long pid1 = 0;
  ASSERT_EQ(fscanf(rank1, "%ld", &pid1), 1);
  ASSERT_GT(pid1, 1);
  struct KillOnExit {  // the stopped rank never exits by itself
    long pid;
    ~KillOnExit() {
      if (pid > 1) ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
  } cleanup{pid1};

  std::string output;
  char line[4096];
  std::optional<std::chrono::steady_clock::time_point> stopped;
  while (fgets(line, sizeof(line), rank0) != nullptr) {
    output += line;
    if (!stopped && output.find(" 2/100000 |") != std::string::npos) {
      ::kill(static_cast<pid_t>(pid1), SIGSTOP);
      stopped = std::chrono::steady_clock::now();
    }
  }
  const int status = pclose(rank0);
  ASSERT_TRUE(stopped.has_value()) << output;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - *stopped).count();
  ::kill(static_cast<pid_t>(pid1), SIGKILL);
  pclose(rank1);  // reaped: the pid is no longer ours to signal
  cleanup.pid = 0;
  EXPECT_NE(status, 0) << output;
  EXPECT_NE(output.find("rank 0 waited longer than trainer.collective_timeout_s"), std::string::npos) << output;
  EXPECT_NE(output.find(" at step "), std::string::npos) << output;  // the step's collective is named
  EXPECT_LT(seconds, 30.0) << output;
}

}  // namespace
