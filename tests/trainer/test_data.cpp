#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "host_api/error.h"
#include "trainer/loop/checkpoint_state.h"
#include "trainer/data/dataset.h"
#include "support/torch_compat.h"  // compat::remove_all

namespace enginery {
namespace {

std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("enginery_data_test_" + std::to_string(getpid()) + "_" + name);
  enginery::compat::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(AdditionTask, EncodesSumLeastSignificantDigitFirstWithMaskOnTheAnswer) {
  AdditionTask task(2, 1);
  const auto t = task.tokens(12, 95);  // 107 -> written 7 0 1
  const int64_t d0 = AdditionTask::kDigit0;
  const std::vector<int64_t> expected = {AdditionTask::kBos, d0 + 1, d0 + 2, AdditionTask::kPlus, d0 + 9, d0 + 5,
                                         AdditionTask::kEquals, d0 + 7, d0 + 0, d0 + 1, AdditionTask::kEos};
  EXPECT_EQ(t, expected);
  EXPECT_EQ(task.seq_len(), 11);
  EXPECT_EQ(task.render(t), "12+95=107");
  const auto mask = task.loss_mask();
  for (int64_t i = 0; i < task.seq_len(); ++i) EXPECT_EQ(mask[i], i >= 7 ? 1.0f : 0.0f) << i;
  for (int64_t tok : t) EXPECT_LT(tok, AdditionTask::kVocabSize);
}

TEST(AdditionTask, TrainingNeverSeesHeldOutPairs) {
  AdditionTask task(2, 7);
  int64_t held = 0;
  for (uint64_t a = 0; a < 100; ++a) {
    for (uint64_t b = 0; b < 100; ++b) held += task.held_out(a, b) ? 1 : 0;
  }
  EXPECT_GT(held, 700);  // about a tenth of 10000
  EXPECT_LT(held, 1300);
  for (int64_t i = 0; i < 2000; ++i) {
    auto [a, b] = task.train_pair(i);
    EXPECT_FALSE(task.held_out(a, b));
    auto [va, vb] = task.val_pair(i);
    EXPECT_TRUE(task.held_out(va, vb));
  }
}

TEST(ShardedSampler, RanksSplitTheSameGlobalBatchForAnyWorldSize) {
  ShardedSampler one(1000, 8, 0, 1, 5, true);
  ShardedSampler r0(1000, 8, 0, 2, 5, true), r1(1000, 8, 1, 2, 5, true);
  for (int64_t step : {0, 1, 124, 125, 300}) {
    auto global = one.indices(step);
    auto a = r0.indices(step), b = r1.indices(step);
    ASSERT_EQ(a.size(), 4u);
    a.insert(a.end(), b.begin(), b.end());
    EXPECT_EQ(a, global) << "step " << step;
  }
}

TEST(ShardedSampler, EachEpochIsAPermutationAndEpochsDiffer) {
  ShardedSampler s(100, 10, 0, 1, 3, true);
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t step = 0; step < 10; ++step) {
    auto i = s.indices(step);
    epoch0.insert(epoch0.end(), i.begin(), i.end());
  }
  for (int64_t step = 10; step < 20; ++step) {
    auto i = s.indices(step);
    epoch1.insert(epoch1.end(), i.begin(), i.end());
  }
  EXPECT_EQ(std::set<int64_t>(epoch0.begin(), epoch0.end()).size(), 100u);
  EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.end()).size(), 100u);
  EXPECT_NE(epoch0, epoch1);
  std::vector<int64_t> sorted(100);
  for (int i = 0; i < 100; ++i) sorted[i] = i;
  EXPECT_NE(epoch0, sorted);  // shuffled
  ShardedSampler plain(100, 10, 0, 1, 3, false);
  EXPECT_EQ(plain.indices(1), std::vector<int64_t>({10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
}

TEST(ShardedSampler, PositionIsTheStepSoResumingGivesTheSameData) {
  ShardedSampler run(500, 16, 1, 2, 9, true);
  std::vector<std::vector<int64_t>> seen;
  for (int64_t step = 0; step < 70; ++step) seen.push_back(run.indices(step));
  ShardedSampler resumed(500, 16, 1, 2, 9, true);  // a fresh process resuming at step 40
  for (int64_t step = 40; step < 70; ++step) EXPECT_EQ(resumed.indices(step), seen[step]) << step;
  ShardedSampler other_seed(500, 16, 1, 2, 10, true);
  EXPECT_NE(other_seed.indices(0), seen[0]);
  EXPECT_THROW(ShardedSampler(500, 15, 0, 2, 1, true), EngineryError);  // 15 does not divide over 2 ranks
}

TEST(Datasets, JsonlRowsWithOptionalMaskAndPerTokenArrays) {
  const auto dir = temp_dir("jsonl");
  const std::string path = (dir / "d.jsonl").string();
  std::ofstream(path) << R"({"input_ids": [5, 6, 7, 8], "loss_mask": [1, 0, 1, 1], "advantages": [0, 1, 2, 3], )"
                         R"("old_log_probs": [0, -1, -1, -1]})" "\n"
                      << "\n"
                      << R"({"input_ids": [9, 10, 11], "advantages": [1, 1, 1], "old_log_probs": [-1, -1, -1]})" "\n";
  JsonlOptions ppo;  // the per-token arrays loss.type = ppo reads
  ppo.loss_inputs = {"old_log_probs", "advantages"};
  ppo.loss_name = "loss.type = ppo";
  auto ds = open_dataset(path, "train", 1024, 3, 0, 1, {}, ppo);
  ASSERT_EQ(ds->size(), 2);
  Example a = ds->get(0), b = ds->get(1);
  EXPECT_EQ(a.loss_mask, std::vector<float>({0, 0, 1, 1}));  // position 0 is never a target
  EXPECT_EQ(b.loss_mask, std::vector<float>({0, 1, 1}));
  EXPECT_EQ(a.extras.at("advantages")[3], 3.0f);

  Batch batch = collate({a, b});
  EXPECT_EQ(batch.at("input_ids").sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(batch.at("attention_mask")[1].sum().item<int64_t>(), 3);
  EXPECT_EQ(batch.at("loss_mask")[1][3].item<float>(), 0.0f);  // padding is not a target
  EXPECT_EQ(batch.at("advantages")[0][2].item<float>(), 2.0f);

  ppo.truncation = "right";  // data.truncation: cut to data.max_length only when asked
  auto truncated = open_dataset(path, "train", 3, 3, 0, 1, {}, ppo);
  EXPECT_EQ(truncated->get(0).input_ids, std::vector<int64_t>({5, 6, 7}));

  const std::string bad = (dir / "bad.jsonl").string();
  std::ofstream(bad) << R"({"input_ids": [1, 2]})" "\n" << R"({"input_ids": [1, 2], "loss_mask": [1]})" "\n";
  try {
    open_dataset(bad, "train", 1024, 3, 0, 1);
    FAIL() << "expected an error";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
}

TEST(Datasets, NanoGptBinWindows) {
  const auto dir = temp_dir("bin");
  const std::string path = (dir / "train.bin").string();
  std::vector<uint16_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[i] = static_cast<uint16_t>(1000 + i);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(tokens.data()), 200);
  auto ds = open_dataset(path, "train", 16, 3, 0, 1);
  EXPECT_EQ(ds->size(), 6);
  Example e = ds->get(2);
  EXPECT_EQ(e.input_ids.front(), 1032);
  EXPECT_EQ(e.input_ids.back(), 1047);
  EXPECT_EQ(e.loss_mask[0], 0.0f);
  EXPECT_EQ(e.loss_mask[1], 1.0f);
  EXPECT_THROW(open_dataset((dir / "x.csv").string(), "train", 16, 3, 0, 1), EngineryError);
}

TEST(CheckpointState, NewestCompleteCheckpointWins) {
  const auto dir = temp_dir("ckpt");
  EXPECT_FALSE(find_latest_checkpoint(dir.string()).has_value());
  std::filesystem::create_directories(checkpoint_dir(dir.string(), 10));
  write_trainer_state(dir.string(), {10, 1, 3, 7, 32});
  std::filesystem::create_directories(checkpoint_dir(dir.string(), 20));  // engine shards only: incomplete
  auto latest = find_latest_checkpoint(dir.string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->global_step, 10);
  EXPECT_EQ(latest->step_in_epoch, 3);
  EXPECT_EQ(latest->data_seed, 7);

  std::filesystem::create_directories(checkpoint_dir(dir.string(), 30));
  write_trainer_state(dir.string(), {30, 2, 0, 7, 32});
  std::filesystem::remove(dir / "latest_checkpointed_iteration.txt");  // the marker is gone: scan
  EXPECT_EQ(find_latest_checkpoint(dir.string())->global_step, 30);
}

}  // namespace
}  // namespace enginery
