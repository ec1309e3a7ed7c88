// The trainer's checkpoint directories: a save in progress (or killed) is invisible to resume, a published one is
// complete, retention keeps the newest complete ones and never the one just written, across restarts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "support/durable_fs.h"
#include "support/torch_compat.h"
#include "trainer/checkpoint_state.h"

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
