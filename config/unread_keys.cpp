// Which keys the run's algorithm, loss and data actually read (config/schema.h, why_not_read). The RL sections
// exist for GRPO only, each offline loss reads its own loss.* keys, the built-in task's knobs need its data, and two
// verl model keys have no reader at all.
#include "config/data_sources.h"
#include "config/schema.h"

namespace enginery {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::string after_dot(const std::string& key) { return key.substr(key.find('.') + 1); }

UnreadKey rl_key(const TrainConfig& c, const std::string& key) {
  if (!c.is_grpo()) {
    return {"is read only by algorithm.adv_estimator = \"grpo\"; this run trains the offline loss.type = \"" +
                c.loss.type + "\"",
            "algorithm.adv_estimator = \"grpo\", or leave the key out"};
  }
  const ActorSection& a = c.actor;
  if ((key == "actor.kl_loss_coef" || key == "actor.kl_loss_type") && !a.use_kl_loss) {
    return {"is read only with actor.use_kl_loss = true", "actor.use_kl_loss = true, or leave the key out"};
  }
  if (key == "actor.clip_ratio" && a.clip_ratio_low && a.clip_ratio_high) {
    return {"is not read: actor.clip_ratio_low and actor.clip_ratio_high are both set",
            "actor.clip_ratio alone, or with one of clip_ratio_low / clip_ratio_high"};
  }
  return {};
}

UnreadKey loss_key(const TrainConfig& c, const std::string& key) {
  if (key == "loss.type") return {};
  if (c.is_grpo()) {
    return {"is not read under algorithm.adv_estimator = \"grpo\", whose loss is set by actor.*",
            "actor." + after_dot(key) + (key == "loss.cliprange_value" ? " (none: GRPO has no critic)" : "")};
  }
  const LossSection& l = c.loss;
  if (key == "loss.loss_agg_mode") return {};  // token-mean, the only mode, is what every offline loss does
  if (key == "loss.cliprange_value") {
    if (l.type == "value") return {};
    return {"is read only by loss.type = \"value\" (this run: \"" + l.type + "\")",
            "loss.type = \"value\", or leave the key out"};
  }
  if (l.type != "ppo") {
    return {"is read only by loss.type = \"ppo\" (this run: \"" + l.type + "\")",
            "loss.type = \"ppo\", or leave the key out"};
  }
  if (key == "loss.clip_ratio" && l.clip_ratio_low && l.clip_ratio_high) {
    return {"is not read: loss.clip_ratio_low and loss.clip_ratio_high are both set",
            "loss.clip_ratio alone, or with one of clip_ratio_low / clip_ratio_high"};
  }
  return {};
}

// The built-in task's knobs with data from files: its train split reads data.train_size, its held-out split
// data.val_size (val_files = "builtin:addition", or none beside builtin train data: evaluate_addition), either split
// data.digits.
UnreadKey builtin_data_key(const TrainConfig& c, const std::string& key) {
  const DataSection& d = c.data;
  const bool builtin_train = is_builtin_addition(d.train_files);
  const bool builtin_val = is_builtin_addition(d.val_files) || (d.val_files.empty() && builtin_train);
  std::string reader = "data.train_files or data.val_files";
  bool read = builtin_train || builtin_val;
  if (key == "data.train_size") {
    reader = "data.train_files";
    read = builtin_train;
  } else if (key == "data.val_size") {
    reader = "data.val_files";
    read = builtin_val;
  }
  if (read) return {};
  const std::string files = "data.train_files = \"" + d.train_files + "\"" +
                            (d.val_files.empty() ? "" : ", data.val_files = \"" + d.val_files + "\"");
  return {"is read only for builtin:addition data (" + files + "): data from files has its own size and tokens",
          "builtin:addition as " + reader + ", or leave the key out"};
}

}  // namespace

UnreadKey why_not_read(const TrainConfig& c, const std::string& key) {
  if (starts_with(key, "rollout.") || starts_with(key, "actor.") || key == "algorithm.norm_adv_by_std_in_grpo") {
    return rl_key(c, key);
  }
  if (starts_with(key, "loss.")) return loss_key(c, key);
  if (key == "data.truncation" || key == "data.unknown_fields") {
    if (is_jsonl(c.data.train_files) || is_jsonl(c.data.val_files)) return {};
    return {"is read only for .jsonl data (data.train_files = \"" + c.data.train_files + "\")",
            "a .jsonl data.train_files or data.val_files, or leave the key out"};
  }
  if (key == "data.digits" || key == "data.train_size" || key == "data.val_size") return builtin_data_key(c, key);
  if (key == "model.tokenizer_path") {
    return {"is not read: enginery takes token ids and loads no tokenizer", "leave the key out"};
  }
  // enginery runs its own model code (models/) and never the checkpoint's: false is what it does.
  if (key == "model.trust_remote_code" && c.model.trust_remote_code) {
    return {"= true is not implemented: enginery runs only its own llama / qwen2 / qwen3 code, never a "
            "checkpoint's",
            "false (the default)"};
  }
  return {};
}

}  // namespace enginery
