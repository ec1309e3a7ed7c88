// What keeps a run's data safe without running one (docs/ARCHITECTURE.md, "Errors"): a used output directory is refused
// or moved aside whole, a checkpoint that cannot be read is named by --resume and never deleted by retention,
// metrics.jsonl is never truncated by a new run, and data that does not fit the model (ids, lengths, FIFOs) is refused
// by name.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "host_api/error.h"
#include "support/torch_compat.h"  // compat::remove_all
#include "trainer/loop/checkpoint_state.h"
#include "trainer/data/dataset.h"
#include "trainer/loop/metrics_log.h"
#include "trainer/loop/run_dir.h"

namespace enginery {
namespace {

namespace fs = std::filesystem;

class RunSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("enginery_run_safety_" + std::to_string(getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    compat::remove_all(base_);
    dir_ = base_ / "run";
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) compat::remove_all(base_);
  }
  TrainConfig config(const std::string& resume_mode = "disable") const {
    TrainConfig c;
    c.trainer.default_local_dir = dir_.string();
    c.trainer.resume_mode = resume_mode;
    return c;
  }
  void save(int64_t step, int64_t keep = 0) {
    begin_checkpoint(dir_.string(), step);
    fs::create_directories(engine_checkpoint_dir(temp_checkpoint_dir(dir_.string(), step)));
    commit_checkpoint(dir_.string(), {step, 0, step, 7, 32}, keep);
  }
  void corrupt(int64_t step, const std::string& text = "{\"global_step\": ") {
    std::ofstream(fs::path(checkpoint_dir(dir_.string(), step)) / "trainer_state.json", std::ios::trunc) << text;
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  template <class F>
  static std::string error_of(F&& f) {
    try {
      f();
    } catch (const EngineryError& e) {
      return e.what();
    }
    return "";
  }
  fs::path base_;
  fs::path dir_;
};

TEST_F(RunSafety, AnUnusedDirectoryIsTakenAsItIs) {
  std::ofstream(dir_ / "config.toml") << "# a run that failed before its first step\n";
  EXPECT_TRUE(run_dir_contents(dir_.string()).empty());
  EXPECT_EQ(prepare_output_dir(config(), false).moved_to, "");
  EXPECT_TRUE(fs::exists(dir_ / "config.toml"));
  EXPECT_EQ(prepare_output_dir(config(), true).moved_to, "");  // nothing to move
  EXPECT_TRUE(run_dir_contents((base_ / "absent").string()).empty());
}

TEST_F(RunSafety, AUsedDirectoryIsRefusedNamingWhatItHolds) {
  std::ofstream(dir_ / "metrics.jsonl") << "{\"step\": 1, \"loss\": 2.0}\n";
  save(20);
  fs::create_directories(dir_ / ".global_step_30.tmp");  // a save that was killed
  const std::vector<std::string> expected = {".global_step_30.tmp", "global_step_20",
                                             "latest_checkpointed_iteration.txt", "metrics.jsonl"};
  EXPECT_EQ(run_dir_contents(dir_.string()), expected);
  const std::string e = error_of([&] { prepare_output_dir(config(), false); });
  EXPECT_NE(e.find(dir_.string() + ": already holds a run (.global_step_30.tmp, global_step_20, "
                                   "latest_checkpointed_iteration.txt, metrics.jsonl)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("--resume"), std::string::npos) << e;
  EXPECT_NE(e.find("--fresh-run"), std::string::npos) << e;
  EXPECT_EQ(read(dir_ / "metrics.jsonl"), "{\"step\": 1, \"loss\": 2.0}\n");  // untouched
}

TEST_F(RunSafety, FreshRunMovesTheWholeOldRunAside) {
  std::ofstream(dir_ / "metrics.jsonl") << "{\"step\": 1}\n";
  save(5);
  const std::string moved = prepare_output_dir(config(), true).moved_to;
  ASSERT_FALSE(moved.empty());
  EXPECT_EQ(fs::path(moved).parent_path(), base_);
  EXPECT_EQ(fs::path(moved).filename().string().rfind("run.old-", 0), 0u) << moved;
  EXPECT_EQ(read(fs::path(moved) / "metrics.jsonl"), "{\"step\": 1}\n");
  EXPECT_TRUE(fs::exists(fs::path(moved) / "global_step_5" / "trainer_state.json"));
  ASSERT_TRUE(fs::is_directory(dir_));
  EXPECT_TRUE(fs::is_empty(dir_));

  // Moved twice within one second: a second name, the first move kept.
  std::ofstream(dir_ / "metrics.jsonl") << "{\"step\": 2}\n";
  const std::string again = prepare_output_dir(config(), true).moved_to;
  EXPECT_NE(again, moved);
  EXPECT_EQ(read(fs::path(moved) / "metrics.jsonl"), "{\"step\": 1}\n");
  EXPECT_EQ(read(fs::path(again) / "metrics.jsonl"), "{\"step\": 2}\n");
}

TEST_F(RunSafety, ResumeNeedsACheckpointInAUsedDirectory) {
  EXPECT_EQ(prepare_output_dir(config("auto"), false).moved_to, "");  // nothing there yet: starts from step 0
  std::ofstream(dir_ / "metrics.jsonl") << "{\"step\": 1}\n";
  const std::string e = error_of([&] { prepare_output_dir(config("auto"), false); });
  EXPECT_NE(e.find("holds a run (metrics.jsonl) but no checkpoint to resume from"), std::string::npos) << e;
  save(3);
  EXPECT_EQ(prepare_output_dir(config("auto"), false).moved_to, "");
  const std::string both = error_of([&] { prepare_output_dir(config("auto"), true); });
  EXPECT_NE(both.find("--fresh-run starts over"), std::string::npos) << both;
}

// --resume first finishes what killed saves left, before it judges the checkpoints: a checkpoint a replacement had
// set aside is put back (it is then the one resumed), a half-removed one and a killed save's temporary directory
// are removed, and each is reported. Hidden names enginery does not write are left alone.
TEST_F(RunSafety, ResumeFinishesWhatKilledSavesLeftBeforeChoosingTheCheckpoint) {
  save(1);
  save(2);
  fs::rename(checkpoint_dir(dir_.string(), 1), dir_ / ".global_step_1.deleting");  // retention killed mid-way
  fs::remove(dir_ / ".global_step_1.deleting" / "trainer_state.json");
  fs::rename(checkpoint_dir(dir_.string(), 2), dir_ / ".global_step_2.replaced");  // killed before the new copy
  fs::create_directories(dir_ / ".global_step_3.tmp" / "actor");                    // a save killed mid-way
  fs::create_directories(dir_ / ".notes.deleting");
  const PreparedOutputDir prepared = prepare_output_dir(config("auto"), false);
  ASSERT_EQ(prepared.finished.size(), 3u);
  std::string lines;
  for (const auto& line : prepared.finished) lines += line + "\n";
  for (const char* name : {".global_step_1.deleting", ".global_step_2.replaced", ".global_step_3.tmp"}) {
    EXPECT_NE(lines.find((dir_ / name).string()), std::string::npos) << name << " not named in:\n" << lines;
    EXPECT_FALSE(fs::exists(dir_ / name)) << name;
  }
  EXPECT_TRUE(fs::exists(dir_ / ".notes.deleting"));
  std::vector<UnusableCheckpoint> older;
  const auto state = checkpoint_to_resume(dir_.string(), older);
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->global_step, 2);
  EXPECT_TRUE(older.empty());
}

// trainer.experiment_name is one folder under runs/: a name that climbs out of it or into another folder
// ("../../x", "a/b") is refused where it is set, naming the allowed form; default_local_dir names any place.
TEST_F(RunSafety, AnExperimentNameIsOneFolderUnderRuns) {
  const fs::path file = base_ / "run.toml";
  std::ofstream(file) << "[trainer]\nexperiment_name = \"ok\"\n";
  for (const std::string name : {"../../x", "..", ".", "a/b", "/abs", "x/"}) {
    const std::string flag = "trainer.experiment_name=\"" + name + "\"";
    const std::string e = error_of([&] { load_train_config(file.string(), {flag}); });
    EXPECT_NE(e.find("--set " + flag + ": trainer.experiment_name"), std::string::npos) << name << ": " << e;
    EXPECT_NE(e.find("trainer.default_local_dir"), std::string::npos) << e;
  }
  std::ofstream(file, std::ios::trunc) << "[trainer]\nexperiment_name = \"../escape\"\n";
  EXPECT_NE(error_of([&] { load_train_config(file.string()); }).find(file.string() + ":2:19: trainer.experiment_name"),
            std::string::npos);
  EXPECT_EQ(load_train_config(file.string(), {"trainer.experiment_name=\"lr=1e-3 ..x\""}).output_dir(),
            "runs/lr=1e-3 ..x");
  EXPECT_EQ(load_train_config(file.string(), {"trainer.default_local_dir=\"../elsewhere\""}).output_dir(),
            "../elsewhere");
}

TEST_F(RunSafety, AnUnreadableNewestCheckpointIsNamedNotSkipped) {
  save(10);
  save(20);
  corrupt(20);
  std::vector<UnusableCheckpoint> older;
  const std::string e = error_of([&] { checkpoint_to_resume(dir_.string(), older); });
  EXPECT_NE(e.find("checkpoint " + checkpoint_dir(dir_.string(), 20) + " cannot be resumed: trainer_state.json is "
                   "unreadable"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("a run resumed from global_step_10 would overwrite it"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { prepare_output_dir(config("auto"), false); }).find("global_step_20"), std::string::npos);

  // One that says another step, or lacks its state file, is as unusable.
  corrupt(20, R"({"global_step": 7, "epoch": 0, "step_in_epoch": 7, "data_seed": 7, "train_batch_size": 32})");
  EXPECT_NE(error_of([&] { checkpoint_to_resume(dir_.string(), older); }).find("says global_step 7"),
            std::string::npos);
  fs::remove(fs::path(checkpoint_dir(dir_.string(), 20)) / "trainer_state.json");
  EXPECT_NE(error_of([&] { checkpoint_to_resume(dir_.string(), older); }).find("trainer_state.json is missing"),
            std::string::npos);
}

TEST_F(RunSafety, AnUnreadableOlderCheckpointIsReportedAndTheNewestResumed) {
  save(10);
  save(20);
  corrupt(10, "not json");
  std::vector<UnusableCheckpoint> older;
  const auto state = checkpoint_to_resume(dir_.string(), older);
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->global_step, 20);
  ASSERT_EQ(older.size(), 1u);
  EXPECT_EQ(older[0].dir, checkpoint_dir(dir_.string(), 10));
  EXPECT_NE(older[0].reason.find("unreadable"), std::string::npos) << older[0].reason;
}

TEST_F(RunSafety, RetentionNeverDeletesWhatItCannotRead) {
  save(1);
  save(2);
  corrupt(1);
  begin_checkpoint(dir_.string(), 3);
  fs::create_directories(engine_checkpoint_dir(temp_checkpoint_dir(dir_.string(), 3)));
  const auto kept = commit_checkpoint(dir_.string(), {3, 0, 3, 7, 32}, 1);
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir_.string(), 1)));   // unreadable: kept, and reported
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_.string(), 2)));  // resumable and older: retired
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir_.string(), 3)));
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].global_step, 1);
}

TEST_F(RunSafety, MetricsAreNeverTruncatedByANewRunAndRewrittenWholeOnResume) {
  {
    MetricsLog log(dir_.string(), -1);
    for (int s = 1; s <= 4; ++s) log.write({{"step", s}, {"loss", 1.0}});
    log.sync();
  }
  const std::string before = read(dir_ / "metrics.jsonl");
  const std::string e = error_of([&] { MetricsLog again(dir_.string(), -1); });
  EXPECT_NE(e.find("metrics.jsonl: already exists"), std::string::npos) << e;
  EXPECT_EQ(read(dir_ / "metrics.jsonl"), before);
  {
    MetricsLog resumed(dir_.string(), 2);  // a checkpoint at step 2: steps 3 and 4 are trained again
    resumed.write({{"step", 3}, {"loss", 0.5}});
  }
  EXPECT_EQ(read(dir_ / "metrics.jsonl"),
            "{\"loss\":1.0,\"step\":1}\n{\"loss\":1.0,\"step\":2}\n{\"loss\":0.5,\"step\":3}\n");
}

// ---- data against the model ----------------------------------------------------------------------------------

TokenLimits tiny_limits() { return TokenLimits{100, 16, "model.path = builtin:test"}; }

TEST_F(RunSafety, ATokenIdOutsideTheVocabularyNamesFileLineIdAndVocabulary) {
  const fs::path jsonl = dir_ / "bad.jsonl";
  std::ofstream(jsonl) << "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1, 100, 3]}\n";
  const std::string e = error_of([&] { open_dataset(jsonl.string(), "train", 64, 3, 0, 1, tiny_limits()); });
  EXPECT_NE(e.find(jsonl.string() + ":2: input_ids: token id 100 is outside the vocabulary of 100 ids of "
                                    "model.path = builtin:test (allowed: 0..99)"),
            std::string::npos)
      << e;
  std::ofstream(jsonl, std::ios::trunc) << "{\"input_ids\": [1, -4, 3]}\n";
  EXPECT_NE(error_of([&] { open_dataset(jsonl.string(), "train", 64, 3, 0, 1, tiny_limits()); })
                .find(":1: input_ids: token id -4 is outside the vocabulary"),
            std::string::npos);

  // .bin: ids are checked in each window as it is read, naming the token's offset.
  const fs::path bin = dir_ / "tokens.bin";
  std::vector<uint16_t> tokens(32, 7);
  tokens[21] = 5000;
  std::ofstream(bin, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), 64);
  auto ds = open_dataset(bin.string(), "train", 8, 3, 0, 1, tiny_limits());
  EXPECT_NO_THROW(ds->get(0));
  const std::string window = error_of([&] { ds->get(2); });
  EXPECT_NE(window.find(bin.string() + ": token 21 (example 2): token id 5000 is outside the vocabulary of 100"),
            std::string::npos)
      << window;
}

TEST_F(RunSafety, ASequenceLongerThanTheModelAcceptsIsRefusedUpFront) {
  const fs::path bin = dir_ / "tokens.bin";
  std::vector<uint16_t> tokens(64, 7);
  std::ofstream(bin, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), 128);
  const std::string e = error_of([&] { open_dataset(bin.string(), "train", 1000000, 3, 0, 1, tiny_limits()); });
  EXPECT_NE(e.find(bin.string() + ": data.max_length, the window of 1000000 tokens is longer than "
                                  "max_position_embeddings = 16 of model.path = builtin:test"),
            std::string::npos)
      << e;

  const fs::path jsonl = dir_ / "long.jsonl";
  std::ofstream out(jsonl);
  out << "{\"input_ids\": [";
  for (int i = 0; i < 40; ++i) out << (i ? ", " : "") << 1;
  out << "]}\n";
  out.close();
  EXPECT_NE(error_of([&] { open_dataset(jsonl.string(), "train", 1024, 3, 0, 1, tiny_limits()); })
                .find(":1: a row of 40 tokens is longer than max_position_embeddings = 16"),
            std::string::npos);
  JsonlOptions cut;
  cut.truncation = "right";
  EXPECT_NO_THROW(open_dataset(jsonl.string(), "train", 16, 3, 0, 1, tiny_limits(), cut));  // cut: fits
  EXPECT_NE(error_of([&] { open_dataset("builtin:addition", "train", 16, 9, 10, 1, tiny_limits()); })
                .find("an example of 32 tokens is longer than max_position_embeddings = 16"),
            std::string::npos);
}

TEST_F(RunSafety, ATokensFileThatIsAFifoIsRefusedWithoutBlocking) {
  for (const std::string name : {"fifo.jsonl", "fifo.bin"}) {
    const fs::path fifo = dir_ / name;
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string e = error_of([&] { open_dataset(fifo.string(), "train", 8, 3, 0, 1, tiny_limits()); });
    EXPECT_NE(e.find(fifo.string() + ": not a regular file"), std::string::npos) << e;
  }
  fs::create_directories(dir_ / "dir.jsonl");
  EXPECT_NE(error_of([&] { open_dataset((dir_ / "dir.jsonl").string(), "train", 8, 3, 0, 1); })
                .find("not a regular file"),
            std::string::npos);
}

}  // namespace
}  // namespace enginery
