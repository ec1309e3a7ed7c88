#pragma once
// The configuration of `enginery train`: one TOML file with verl's section and key names and defaults, plus
// dotted `--set key=value` overrides. Parsing validates everything that can be checked before any rank starts
// (unknown keys, types, enums, precision strings) and names file:line:col or the flag in its errors.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <utility>
#include <variant>

#include "host_api/config.h"

namespace enginery {

// verl trainer.* (subset). Differences from verl, on purpose:
//  - default_local_dir "" means runs/<experiment_name> (verl: checkpoints/<project>/<experiment>), so a newcomer
//    finds the demo's outputs next to where they typed `make demo`.
//  - resume_mode defaults to "disable"; `enginery train --resume` sets "auto" (newest complete checkpoint).
//  - device "auto": cuda when LibTorch sees a GPU, else cpu.
struct TrainerSection {
  std::string project_name = "enginery";
  std::string experiment_name = "default";
  int64_t total_training_steps = 0;  // 0: total_epochs * steps per epoch
  int64_t total_epochs = 1;
  int64_t save_freq = -1;  // -1: never (a final checkpoint is not forced either, as verl)
  int64_t test_freq = -1;  // -1: never
  int64_t log_freq = 1;    // progress line every N steps (metrics.jsonl always gets every step)
  bool val_before_train = true;
  std::string default_local_dir;  // "" -> runs/<experiment_name>
  std::string device = "auto";     // auto | cpu | cuda
  std::string resume_mode = "disable";  // disable | auto
  int64_t max_ckpt_to_keep = -1;   // -1: keep all
  // Seconds a rank waits in one collective (and in the store after the rendezvous) before failing with the
  // collective's name, instead of hanging on a stopped or lost peer. 600 is torch's NCCL default (its Gloo default,
  // 1800, left a stopped rank unreported for half an hour); not a verl key.
  double collective_timeout_s = 600.0;
  // Seconds the rendezvous may take: connecting to rank 0's store and every rank checking in (launch/rendezvous.h).
  // 300 is c10d's TCPStore default, which torchrun's rendezvous also uses; ranks start seconds apart. Not a verl key.
  double rendezvous_timeout_s = 300.0;
};

struct PluginsSection {
  // Directories searched for plugin manifests (each <dir>/<plugin>/plugin.toml). Empty: the build tree's
  // plugins/ beside bin/, then the install prefix.
  std::vector<std::string> dirs;
};

// verl data.* (subset) plus the built-in synthetic task's knobs.
struct DataSection {
  std::string train_files = "builtin:addition";  // builtin:addition | *.jsonl | *.bin (nanoGPT uint16 tokens)
  std::string val_files;  // "" -> builtin: its held-out split; files: no evaluation data
  int64_t train_batch_size = 256;  // global, over all data-parallel ranks
  int64_t max_length = 1024;       // .bin window length; the longest .jsonl row (see truncation)
  std::string truncation = "error";      // .jsonl rows longer than max_length: error | left | right (verl's knob)
  std::string unknown_fields = "error";  // .jsonl fields outside the schema (README "Data files"): error | ignore
  int64_t seed = 1;
  bool shuffle = true;
  int64_t digits = 3;          // builtin:addition: operand width
  int64_t train_size = 100000;  // builtin:addition: examples per epoch
  int64_t val_size = 256;      // builtin:addition: held-out examples evaluated every test_freq steps
};

// loss.type's values: the schema's choice, and each loss's inputs a .jsonl row may carry.
inline const std::vector<std::string> kLossTypes = {"sft", "ppo", "value"};

// The objective. verl keeps these in actor.* / critic.*; here one small section.
struct LossSection {
  std::string type = "sft";  // sft | ppo | value
  double clip_ratio = 0.2;
  std::optional<double> clip_ratio_low;   // default clip_ratio
  std::optional<double> clip_ratio_high;  // default clip_ratio
  double clip_ratio_c = 3.0;              // dual-clip bound for negative advantages
  double cliprange_value = 0.5;
  std::string loss_agg_mode = "token-mean";
};

// verl algorithm.* (subset): which online algorithm `enginery train` runs. "none" trains the offline objective of
// loss.type on data.train_files; "grpo" samples rollout.n responses per prompt, scores them with a rule-based
// reward and trains the clipped policy loss of actor.* on group-normalised advantages (trainer/grpo/). verl's
// default "gae" needs a critic, which enginery does not train online, so it is not offered.
struct AlgorithmSection {
  std::string adv_estimator = "none";  // none | grpo
  bool norm_adv_by_std_in_grpo = true;  // false: Dr. GRPO's mean-only centring
};

// verl actor_rollout_ref.rollout.* (subset), written [rollout] or [actor_rollout_ref.rollout]. The rollout is a
// local unsharded copy of the model on every rank, refreshed from the actor by its weight stream each step.
struct RolloutSection {
  int64_t n = 1;                   // responses per prompt (the group size)
  // Checked as `enginery generate` checks its flags (models/generation_settings.h).
  double temperature = 1.0;        // >= 0.01, finite
  double top_p = 1.0;              // (0, 1]; 1: off
  int64_t top_k = -1;              // -1 or 0: off (verl's -1); else >= 1
  int64_t response_length = 512;   // new tokens at most (verl: data.max_response_length); prompt + this must fit
                                   // max_position_embeddings
  c10::ScalarType dtype = c10::kBFloat16;  // the rollout copy's parameters (verl rollout.dtype)
};

// verl actor_rollout_ref.actor.* (subset), written [actor] or [actor_rollout_ref.actor]: GRPO's policy update.
// ppo_mini_batch_size counts prompts over all ranks, as verl's (each brings rollout.n responses); each mini-batch
// is one optimizer step, so optim.lr_warmup_steps and the schedule count those.
struct ActorSection {
  int64_t ppo_mini_batch_size = 256;
  int64_t ppo_epochs = 1;
  double clip_ratio = 0.2;
  std::optional<double> clip_ratio_low;   // default clip_ratio
  std::optional<double> clip_ratio_high;  // default clip_ratio
  double clip_ratio_c = 3.0;              // dual-clip bound for negative advantages
  bool use_kl_loss = false;               // KL to the frozen reference model (the initial weights) in the loss
  double kl_loss_coef = 0.001;
  std::string kl_loss_type = "low_var_kl";  // verl kl_penalty: kl|k1, abs, mse|k2, low_var_kl|k3
  double entropy_coeff = 0.0;               // loss -= entropy_coeff * token-mean entropy
  std::string loss_agg_mode = "token-mean";
};

struct TrainConfig {
  TrainerSection trainer;
  PluginsSection plugins;
  ModelConfig model;
  EngineConfig engine;
  OptimizerConfig optim;
  DataSection data;
  LossSection loss;
  CheckpointConfig checkpoint;
  AlgorithmSection algorithm;
  RolloutSection rollout;
  ActorSection actor;

  std::string source;  // the file it came from
  // Where each given key was set: "file:line:col" or "--set key=value". Keys left at their default are absent.
  std::map<std::string, std::string> origins;
  std::string where(const std::string& key) const;  // origins[key], else the file

  std::string output_dir() const;   // trainer.default_local_dir or runs/<experiment_name>
  std::string model_type() const;   // "value_model" for loss.type value, else "language_model"
  bool is_grpo() const { return algorithm.adv_estimator == "grpo"; }
};

// Parses `path` and applies `overrides` ("a.b.c=value", value in TOML syntax; a value that is not valid TOML is
// taken as a plain string). Throws EngineryError naming file:line:col (or the --set flag), the key, and what is
// allowed.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same parse and checks for a document made of `overrides` alone (every other key at its default), for callers
// without a file. Errors name "<source> <key>=<value>".
TrainConfig train_config_from_overrides(const std::vector<std::string>& overrides, const std::string& source);

// A typed value of a config key, as a host without TOML text holds it (the Python module's config dict): a scalar
// or a list of scalars.
using ConfigList = std::vector<ScalarValue>;
using ConfigValue = std::variant<ScalarValue, ConfigList>;
// The same parse and checks for a document of these dotted keys and values, with no TOML text in between. Errors
// name "<source> <key>".
TrainConfig train_config_from_values(const std::vector<std::pair<std::string, ConfigValue>>& values,
                                     const std::string& source);

// The fully resolved configuration (every key, defaults included) as TOML that load_train_config reads back.
std::string to_toml(const TrainConfig& config);

}  // namespace enginery
