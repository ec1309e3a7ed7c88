// The trainer's checkpoint directories: a save in progress (or killed) is invisible to resume, a published one is
// complete, retention keeps the newest complete ones and never the one just written, across restarts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "host_api/error.h"
#include "support/durable_fs.h"
#include "support/torch_compat.h"
#include "trainer/loop/checkpoint_state.h"

namespace enginery {
namespace {

namespace fs = std::filesystem;

class CheckpointStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("enginery_ckpt_state_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::error_code ec;
    compat::remove_all(dir_, ec);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    compat::remove_all(dir_, ec);
  }
  // What the train loop does around the engine's save, with a stand-in for the engine's files.
  void save(int64_t step, int64_t keep) {
    begin_checkpoint(dir_.string(), step);
    const fs::path engine_dir = engine_checkpoint_dir(temp_checkpoint_dir(dir_.string(), step));
    fs::create_directories(engine_dir);
    std::ofstream(engine_dir / "weights") << step;
    commit_checkpoint(dir_.string(), {step, 0, step, 7, 32}, keep);
  }
  fs::path dir_;
};

TEST_F(CheckpointStateTest, ASaveThatDidNotCommitIsInvisible) {
  save(10, 0);
  begin_checkpoint(dir_.string(), 20);  // killed before commit: the engine files may even be all there
  fs::create_directories(engine_checkpoint_dir(temp_checkpoint_dir(dir_.string(), 20)));
  auto latest = find_latest_checkpoint(dir_.string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->global_step, 10);
  EXPECT_EQ(latest->step_in_epoch, 10);
  EXPECT_TRUE(fs::exists(fs::path(checkpoint_dir(dir_.string(), 10)) / "actor" / "weights"));

  save(20, 0);  // the next save of that step starts from a clean temporary directory
  EXPECT_EQ(find_latest_checkpoint(dir_.string())->global_step, 20);
  EXPECT_FALSE(fs::exists(temp_checkpoint_dir(dir_.string(), 20)));
  std::ifstream marker(dir_ / "latest_checkpointed_iteration.txt");
  int64_t step = 0;
  marker >> step;
  EXPECT_EQ(step, 20);
}

TEST_F(CheckpointStateTest, TheMarkerLaggingBehindDoesNotHideTheNewest) {
  save(10, 0);
  save(20, 0);
  durable::replace_file(dir_ / "latest_checkpointed_iteration.txt", "10\n");  // killed between rename and marker
  EXPECT_EQ(find_latest_checkpoint(dir_.string())->global_step, 20);
}

TEST_F(CheckpointStateTest, RetentionKeepsTheNewestCompleteAcrossRestarts) {
  save(1, 0);
  save(2, 0);
  save(3, 0);
  fs::create_directories(checkpoint_dir(dir_.string(), 9));  // not ours (no trainer_state.json): left alone
  fs::create_directories(dir_ / "other");
  save(4, 2);  // as a restarted run would: only what is on disk counts
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_.string(), 1)));
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_.string(), 2)));
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir_.string(), 3)));
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir_.string(), 4)));
  EXPECT_TRUE(fs::exists(checkpoint_dir(dir_.string(), 9)));
  EXPECT_TRUE(fs::exists(dir_ / "other"));
  save(5, 1);
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_.string(), 3)));
  EXPECT_FALSE(fs::exists(checkpoint_dir(dir_.string(), 4)));
  EXPECT_EQ(find_latest_checkpoint(dir_.string())->global_step, 5);
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".deleting"), std::string::npos) << e.path();
  }
}

TEST_F(CheckpointStateTest, PublishReplacesAnExistingDirectory) {
  save(3, 0);
  save(3, 0);  // the same step saved again (a rerun from an earlier checkpoint)
  EXPECT_EQ(find_latest_checkpoint(dir_.string())->global_step, 3);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 2u);  // global_step_3 and the marker, nothing left aside
}

// A save of the same step again must not touch what its previous save did not write: a file someone put into a
// published checkpoint is named and kept, and the refusal comes before the engine writes anything.
TEST_F(CheckpointStateTest, ReplacingACheckpointKeepsWhatItsSaveDidNotWrite) {
  save(3, 0);
  const fs::path published = checkpoint_dir(dir_.string(), 3);
  std::ofstream(published / "eval_notes.txt") << "mine";
  std::string error;
  try {
    save(3, 0);
  } catch (const EngineryError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find(published.string()), std::string::npos) << error;
  EXPECT_NE(error.find("eval_notes.txt"), std::string::npos) << error;
  EXPECT_TRUE(fs::exists(published / "eval_notes.txt"));
  EXPECT_TRUE(fs::exists(published / "actor" / "weights"));
  EXPECT_EQ(find_latest_checkpoint(dir_.string())->global_step, 3);
}

// What a kill leaves of retention (a half-removed .global_step_<N>.deleting) and of a replacement on a file system
// without an atomic exchange (the previous copy set aside as .global_step_<N>.replaced, with or without the new one
// in place) is finished by the next save into that directory.
TEST_F(CheckpointStateTest, TheNextSaveFinishesAnInterruptedPruningOrReplacement) {
  save(1, 0);
  save(2, 0);
  save(5, 0);
  fs::rename(checkpoint_dir(dir_.string(), 1), dir_ / ".global_step_1.deleting");  // pruning killed mid-way
  fs::remove(dir_ / ".global_step_1.deleting" / "trainer_state.json");
  fs::rename(checkpoint_dir(dir_.string(), 2), dir_ / ".global_step_2.replaced");  // killed before the new one
  fs::copy(checkpoint_dir(dir_.string(), 5), dir_ / ".global_step_5.replaced",
           fs::copy_options::recursive);  // killed after the new one arrived
  fs::create_directories(dir_ / ".mine.deleting");  // not a name enginery writes: left alone
  save(6, 0);
  for (const char* gone : {".global_step_1.deleting", ".global_step_2.replaced",
                           ".global_step_5.replaced"}) {
    EXPECT_FALSE(fs::exists(dir_ / gone)) << gone;
  }
  EXPECT_TRUE(fs::exists(dir_ / ".mine.deleting"));
  const CheckpointScan scan = scan_checkpoints(dir_.string());
  ASSERT_EQ(scan.resumable.size(), 3u);
  EXPECT_EQ(scan.resumable[0].global_step, 2);  // put back: it was the only copy
  EXPECT_EQ(scan.resumable[1].global_step, 5);
  EXPECT_EQ(scan.resumable[2].global_step, 6);
}

// Replacing a published directory exchanges the two (renameat2), so its name never stops naming a complete one: a
// reader polling it all through many replacements never finds it missing.
TEST(DurableFs, ReplacingADirectoryNeverLeavesItsNameEmpty) {
  const fs::path root = fs::temp_directory_path() / ("enginery_durable_exchange_" + std::to_string(::getpid()));
  std::error_code ec;
  compat::remove_all(root, ec);
  const fs::path published = root / "global_step_1";
  fs::create_directories(published);
  std::ofstream(published / "metadata.json") << 0;
  std::atomic<bool> done{false};
  std::atomic<int64_t> looks{0}, missing{0};
  std::thread reader([&] {
    while (!done) {
      ++looks;
      if (::access((published / "metadata.json").c_str(), F_OK) != 0) ++missing;
    }
  });
  for (int i = 1; i <= 100; ++i) {
    const fs::path tmp = durable::temp_dir_for(published);
    durable::fresh_dir(tmp);
    std::ofstream(tmp / "metadata.json") << i;
    durable::publish_dir(tmp, published);
  }
  done = true;
  reader.join();
  EXPECT_EQ(missing, 0) << "of " << looks << " looks";
  std::ifstream last(published / "metadata.json");
  int value = 0;
  last >> value;
  EXPECT_EQ(value, 100);
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(root)) entries += e.path() != published;
  EXPECT_EQ(entries, 0u);  // nothing left aside
  compat::remove_all(root, ec);
}

TEST(DurableFs, GlobalStepNames) {
  EXPECT_EQ(durable::global_step_of("/a/global_step_12"), 12);
  EXPECT_EQ(durable::global_step_of("global_step_0"), 0);
  EXPECT_EQ(durable::global_step_of("/a/global_step_"), -1);
  EXPECT_EQ(durable::global_step_of("/a/global_step_1x"), -1);
  EXPECT_EQ(durable::global_step_of("/a/.global_step_3.tmp"), -1);
  EXPECT_EQ(durable::global_step_of("/a/checkpoint-3"), -1);
}

}  // namespace
}  // namespace enginery
