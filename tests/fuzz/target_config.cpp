// Targets of the run config (config/reader.cpp): the TOML file itself, and --set overrides applied to
// examples/demo.toml (less its built-in task's knobs). A config that loads must also survive the printer: to_toml's output is what a run saves as
// its config.toml, and it must load again (config/train_config.h).
#include <sstream>

#include "host_api/error.h"
#include "tests/fuzz/targets.h"
#include "config/train_config.h"

namespace enginery {
namespace fuzz {
namespace {

// The entry point under test: load_train_config reads a path, so the input goes through a file.
TrainConfig load_config_text(const std::string& text, const std::vector<std::string>& overrides) {
  const std::filesystem::path path = scratch_dir() / "config.toml";
  write_file(path, text);
  return load_train_config(path.string(), overrides);
}

void check_round_trip(const TrainConfig& config) {
  const std::string printed = to_toml(config);
  const std::filesystem::path path = scratch_dir() / "printed.toml";
  write_file(path, printed);
  try {
    load_train_config(path.string());
  } catch (const EngineryError& e) {
    throw Finding(std::string("to_toml wrote a config that does not load again: ") + e.what());
  }
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

const std::vector<std::string>& config_keys() {
  static const std::vector<std::string> keys = {
      "[trainer]\n", "[model]\n", "[engine]\n", "[engine.mixed_precision]\n", "[engine.grad_scaler]\n",
      "[engine.fsdp]\n", "[optim]\n", "[data]\n", "[loss]\n", "[checkpoint]\n", "[plugins]\n", "strategy",
      "engine.", "trainer.", "optim.betas", "plugins.dirs", "param_dtype", "total_training_steps", "fsdp_size",
      "save_contents", "clip_ratio_low", "\"a.b\"", "model.path", "[algorithm]\n", "[rollout]\n", "[actor]\n",
      "[actor_rollout_ref.rollout]\n", "[actor_rollout_ref.actor]\n", "adv_estimator = \"grpo\"", "response_length",
      "temperature", "top_p", "top_k", "rollout.dtype", "use_kl_loss", "kl_loss_coef", "truncation",
      "unknown_fields", "tokenizer_path", "trust_remote_code", "cliprange_value", "rendezvous_timeout_s",
      "collective_timeout_s"};
  return keys;
}

}  // namespace

namespace config {
void fuzz_one(const std::string& input) { check_round_trip(load_config_text(input, {})); }
}  // namespace config

namespace config_overrides {
// The demo config without its built-in task's width and held-out size: several seeds name data from files, beside
// which those keys are refused (config/unread_keys.cpp).
std::string demo_for_any_data() {
  std::string out;
  for (const std::string& line : lines(read_file(source_dir() / "examples/demo.toml"))) {
    if (line.rfind("digits", 0) != 0 && line.rfind("val_size", 0) != 0) out += line + "\n";
  }
  return out;
}

// One --set flag per line of the input, on top of that config.
void fuzz_one(const std::string& input) {
  static const std::string demo = demo_for_any_data();
  check_round_trip(load_config_text(demo, lines(input)));
}
}  // namespace config_overrides

Target config_target() {
  Target t;
  t.name = "config";
  t.syntax = Syntax::kToml;
  t.fuzz_one = config::fuzz_one;
  t.seeds = [] { return std::vector<std::string>{read_file(source_dir() / "examples/demo.toml")}; };
  t.dictionary = config_keys();
  return t;
}

Target config_overrides_target() {
  Target t;
  t.name = "config_overrides";
  t.syntax = Syntax::kToml;
  t.fuzz_one = config_overrides::fuzz_one;
  t.seeds = [] {
    return std::vector<std::string>{
        "trainer.total_training_steps=100",
        "optim.betas=[0.9, 0.95]\ndata.train_files=train.jsonl",
        "engine.mixed_precision.param_dtype=\"bf16\"\nengine.model_dtype=32",
        "engine.strategy=fsdp2\nengine.fsdp2.option=1\nloss.type=ppo\nloss.clip_ratio_low=0.1",
        "plugins.dirs=[\"/opt/plugins\", \"plugins\"]\ncheckpoint.save_contents=[\"model\"]",
        "trainer.experiment_name=run 1\nengine.grad_scaler.enabled=always",
        "algorithm.adv_estimator=grpo\nactor.ppo_mini_batch_size=64\nrollout.response_length=4\nrollout.top_k=-1",
        "algorithm.adv_estimator=grpo\nactor.ppo_mini_batch_size=64\nrollout.temperature=0.5\n"
        "actor.use_kl_loss=true\nactor.kl_loss_coef=0.1",
        "algorithm.adv_estimator=grpo\nactor_rollout_ref.actor.ppo_mini_batch_size=64\nactor_rollout_ref.rollout.n=4\n"
        "actor_rollout_ref.actor.ppo_epochs=2\nalgorithm.norm_adv_by_std_in_grpo=false",
        "data.train_files=d.jsonl\ndata.truncation=left\ndata.unknown_fields=ignore\nmodel.trust_remote_code=false\n"
        "loss.type=value\nloss.cliprange_value=0.3"};
  };
  t.dictionary = config_keys();
  return t;
}

}  // namespace fuzz
}  // namespace enginery
