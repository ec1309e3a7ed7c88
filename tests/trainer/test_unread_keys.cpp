// A key the run's algorithm, loss or data does not read is refused by name where it was set, never accepted and
// ignored (config/unread_keys.cpp): RL sections under an offline loss, loss.* keys of another loss or under GRPO,
// the KL keys without use_kl_loss, .jsonl options without .jsonl data, the built-in task's knobs with data from
// files, and verl's model keys with no reader. The resolved config leaves such keys out, so it still reads back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "host_api/error.h"
#include "config/train_config.h"

namespace enginery {
namespace {

std::string reads_config(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("enginery_config_reads_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

std::string reads_error(const std::string& path, const std::vector<std::string>& overrides = {}) {
  try {
    load_train_config(path, overrides);
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "no error";
}

const char* kSftOnly = "[trainer]\nexperiment_name = \"sft\"\n[loss]\ntype = \"sft\"\n";
const char* kGrpoOnly = "[algorithm]\nadv_estimator = \"grpo\"\n[data]\ntrain_batch_size = 8\n[actor]\n"
                    "ppo_mini_batch_size = 4\n";

TEST(ConfigReads, RlSectionsUnderAnOfflineLossAreRefusedWhereSet) {
  const std::string rollout = reads_config("rollout.toml", std::string(kSftOnly) + "[rollout]\nn = 4\n");
  EXPECT_EQ(reads_error(rollout), rollout + ":6:5: rollout.n is read only by algorithm.adv_estimator = \"grpo\"; this "
                                         "run trains the offline loss.type = \"sft\" (allowed: "
                                         "algorithm.adv_estimator = \"grpo\", or leave the key out)");
  const std::string verl =
      reads_config("verl.toml", std::string(kSftOnly) + "[actor_rollout_ref.actor]\nppo_epochs = 2\n");
  EXPECT_EQ(reads_error(verl), verl + ":6:14: actor.ppo_epochs is read only by algorithm.adv_estimator = \"grpo\"; "
                                   "this run trains the offline loss.type = \"sft\" (allowed: "
                                   "algorithm.adv_estimator = \"grpo\", or leave the key out)");
  const std::string base = reads_config("base.toml", kSftOnly);
  EXPECT_EQ(reads_error(base, {"algorithm.norm_adv_by_std_in_grpo=false"}),
            "--set algorithm.norm_adv_by_std_in_grpo=false: algorithm.norm_adv_by_std_in_grpo is read only by "
            "algorithm.adv_estimator = \"grpo\"; this run trains the offline loss.type = \"sft\" (allowed: "
            "algorithm.adv_estimator = \"grpo\", or leave the key out)");
  EXPECT_NE(reads_error(base, {"actor_rollout_ref.rollout.temperature=0.5"})
                .find("--set actor_rollout_ref.rollout.temperature=0.5: rollout.temperature is read only by"),
            std::string::npos);
  // Setting the selector to its default is what it reads: accepted.
  EXPECT_EQ(reads_error(base, {"algorithm.adv_estimator=none"}), "no error");
}

TEST(ConfigReads, LossKeysOfAnotherLossAreRefused) {
  const std::string base = reads_config("loss.toml", kSftOnly);
  EXPECT_EQ(reads_error(base, {"loss.clip_ratio=0.1"}),
            "--set loss.clip_ratio=0.1: loss.clip_ratio is read only by loss.type = \"ppo\" (this run: \"sft\") "
            "(allowed: loss.type = \"ppo\", or leave the key out)");
  EXPECT_NE(reads_error(base, {"loss.type=value", "loss.clip_ratio_c=2"})
                .find("loss.clip_ratio_c is read only by loss.type = \"ppo\" (this run: \"value\")"),
            std::string::npos);
  EXPECT_NE(reads_error(base, {"loss.type=ppo", "loss.cliprange_value=0.2"})
                .find("loss.cliprange_value is read only by loss.type = \"value\" (this run: \"ppo\")"),
            std::string::npos);
  EXPECT_NE(reads_error(base, {"loss.type=ppo", "loss.clip_ratio=0.2", "loss.clip_ratio_low=0.1",
                            "loss.clip_ratio_high=0.3"})
                .find("loss.clip_ratio is not read: loss.clip_ratio_low and loss.clip_ratio_high are both set"),
            std::string::npos);
  EXPECT_EQ(reads_error(base, {"loss.type=ppo", "loss.clip_ratio=0.2", "loss.clip_ratio_high=0.3"}), "no error");
  EXPECT_EQ(reads_error(base, {"loss.type=value", "loss.cliprange_value=0.2"}), "no error");
}

TEST(ConfigReads, UnderGrpoLossKeysAndTheKlKeysWithoutKlAreRefused) {
  const std::string grpo = reads_config("grpo.toml", kGrpoOnly);
  EXPECT_EQ(reads_error(grpo), "no error");
  EXPECT_EQ(reads_error(grpo, {"loss.clip_ratio=0.1"}),
            "--set loss.clip_ratio=0.1: loss.clip_ratio is not read under algorithm.adv_estimator = \"grpo\", whose "
            "loss is set by actor.* (allowed: actor.clip_ratio)");
  EXPECT_EQ(reads_error(grpo, {"actor.kl_loss_coef=0.1"}),
            "--set actor.kl_loss_coef=0.1: actor.kl_loss_coef is read only with actor.use_kl_loss = true (allowed: "
            "actor.use_kl_loss = true, or leave the key out)");
  EXPECT_EQ(reads_error(grpo, {"actor.use_kl_loss=true", "actor.kl_loss_coef=0.1", "actor.kl_loss_type=k2"}),
            "no error");
}

TEST(ConfigReads, ModelKeysWithoutAReaderAndJsonlOptionsWithoutJsonlAreRefused) {
  const std::string base = reads_config("model.toml", kSftOnly);
  EXPECT_EQ(reads_error(base, {"model.tokenizer_path=/models/tok"}),
            "--set model.tokenizer_path=/models/tok: model.tokenizer_path is not read: enginery takes token ids and "
            "loads no tokenizer (allowed: leave the key out)");
  EXPECT_EQ(reads_error(base, {"model.trust_remote_code=true"}),
            "--set model.trust_remote_code=true: model.trust_remote_code = true is not implemented: enginery runs "
            "only its own llama / qwen2 / qwen3 code, never a checkpoint's (allowed: false (the default))");
  EXPECT_EQ(reads_error(base, {"model.trust_remote_code=false"}), "no error");
  EXPECT_EQ(reads_error(base, {"data.truncation=left"}),
            "--set data.truncation=left: data.truncation is read only for .jsonl data (data.train_files = "
            "\"builtin:addition\") (allowed: a .jsonl data.train_files or data.val_files, or leave the key out)");
  EXPECT_EQ(reads_error(base, {"data.train_files=d.jsonl", "data.truncation=left", "data.unknown_fields=ignore"}),
            "no error");
  EXPECT_NE(reads_error(base, {"data.train_files=d.jsonl", "data.truncation=middle"})
                .find("allowed: error, left, right"),
            std::string::npos);
}

// The built-in task's size and width with data from files were accepted and ignored: each is refused by name, and
// read wherever a split of the built-in task is (issue 41).
TEST(ConfigReads, BuiltinTaskKnobsWithDataFromFilesAreRefused) {
  const std::string base = reads_config("files.toml", kSftOnly);
  EXPECT_EQ(reads_error(base, {"data.train_files=d.jsonl", "data.digits=2"}),
            "--set data.digits=2: data.digits is read only for builtin:addition data (data.train_files = \"d.jsonl\"): "
            "data from files has its own size and tokens (allowed: builtin:addition as data.train_files or "
            "data.val_files, or leave the key out)");
  EXPECT_EQ(reads_error(base, {"data.train_files=d.bin", "data.train_size=500"}),
            "--set data.train_size=500: data.train_size is read only for builtin:addition data (data.train_files = "
            "\"d.bin\"): data from files has its own size and tokens (allowed: builtin:addition as data.train_files, "
            "or leave the key out)");
  EXPECT_EQ(reads_error(base, {"data.val_files=v.jsonl", "data.val_size=8"}),
            "--set data.val_size=8: data.val_size is read only for builtin:addition data (data.train_files = "
            "\"builtin:addition\", data.val_files = \"v.jsonl\"): data from files has its own size and tokens "
            "(allowed: builtin:addition as data.val_files, or leave the key out)");
  const std::string file_key =
      reads_config("file_key.toml", std::string(kSftOnly) + "[data]\ntrain_files = \"d.jsonl\"\nval_size = 8\n");
  EXPECT_NE(reads_error(file_key).find(file_key + ":7:12: data.val_size is read only for builtin:addition data"),
            std::string::npos)
      << reads_error(file_key);
  // Read where a split is the built-in task: builtin training data (digits, both sizes: its held-out split is the
  // evaluation's), or builtin held-out data beside a file.
  EXPECT_EQ(reads_error(base, {"data.digits=2", "data.train_size=500", "data.val_size=8"}), "no error");
  EXPECT_EQ(reads_error(base, {"data.train_files=d.jsonl", "data.val_files=builtin:addition", "data.digits=2",
                               "data.val_size=8"}),
            "no error");
  // The resolved config of a file-data run leaves them out, so it reads back.
  TrainConfig files = load_train_config(base, {"data.train_files=d.jsonl"});
  const std::string text = to_toml(files);
  for (const std::string absent : {"digits", "train_size", "val_size"}) {
    EXPECT_EQ(text.find(absent), std::string::npos) << absent << " in\n" << text;
  }
}

// An evaluation with nothing to evaluate reported "exact match 0.0% (0/0)" every test_freq steps: refused up front,
// naming both keys, as verl refuses an empty validation set before training ("Validation dataloader is empty!").
TEST(ConfigReads, AnEvaluationOfNoExamplesIsRefused) {
  const std::string base = reads_config("eval.toml", kSftOnly);
  EXPECT_EQ(reads_error(base, {"trainer.test_freq=1", "data.val_size=0"}),
            "--set data.val_size=0: data.val_size = 0 leaves no held-out example for the evaluation every "
            "trainer.test_freq = 1 steps (allowed: data.val_size >= 1, or trainer.test_freq = -1 (no evaluation))");
  EXPECT_NE(reads_error(base, {"trainer.test_freq=5", "data.val_files=builtin:addition", "data.val_size=-3"})
                .find("data.val_size = -3 leaves no held-out example for the evaluation every trainer.test_freq = 5"),
            std::string::npos);
  EXPECT_EQ(reads_error(base, {"trainer.test_freq=-1", "data.val_size=0"}), "no error");
  EXPECT_EQ(reads_error(base, {"trainer.test_freq=1", "data.val_size=1"}), "no error");
}

TEST(ConfigReads, TheResolvedConfigLeavesUnreadKeysOutAndReadsBack) {
  const TrainConfig sft = load_train_config(reads_config("sft.toml", kSftOnly));
  const std::string text = to_toml(sft);
  for (const std::string absent : {"[rollout]", "[actor]", "norm_adv_by_std_in_grpo", "clip_ratio", "tokenizer_path",
                                   "truncation"}) {
    EXPECT_EQ(text.find(absent), std::string::npos) << absent << " in\n" << text;
  }
  EXPECT_NE(text.find("adv_estimator = 'none'"), std::string::npos) << text;
  EXPECT_NO_THROW(load_train_config(reads_config("sft_again.toml", text)));

  const TrainConfig grpo = load_train_config(reads_config("grpo_print.toml", kGrpoOnly));
  const std::string rl = to_toml(grpo);
  EXPECT_NE(rl.find("response_length = 512"), std::string::npos) << rl;
  EXPECT_EQ(rl.find("kl_loss_coef"), std::string::npos) << rl;  // use_kl_loss = false
  EXPECT_EQ(rl.find("cliprange_value"), std::string::npos) << rl;
  TrainConfig again = load_train_config(reads_config("grpo_again.toml", rl));
  again.source = grpo.source;
  EXPECT_EQ(to_toml(again), rl);
}

}  // namespace
}  // namespace enginery
