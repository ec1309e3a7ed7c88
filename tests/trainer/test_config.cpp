#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "host_api/config.h"
#include "host_api/error.h"
#include "config/train_config.h"

namespace enginery {
namespace {

std::string write_config(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("enginery_config_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& path, const std::vector<std::string>& overrides = {}) {
  try {
    load_train_config(path, overrides);
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainConfig, ReadsVerlKeysAndKeepsDefaults) {
  const auto path = write_config("ok.toml", R"(
[trainer]
total_training_steps = 10
save_freq = 5
experiment_name = "x"

[engine]
strategy = "fsdp2"
micro_batch_size_per_gpu = 4

[engine.mixed_precision]
param_dtype = "bfloat16"
reduce_dtype = 32

[engine.fsdp2]
bucket_mb = 25
fast = true

[optim]
lr = 1
betas = [0.8, 0.95]

[data]
train_batch_size = 16
)");
  TrainConfig c = load_train_config(path);
  EXPECT_EQ(c.trainer.total_training_steps, 10);
  EXPECT_EQ(c.trainer.save_freq, 5);
  EXPECT_EQ(c.trainer.test_freq, -1);  // verl default
  EXPECT_EQ(c.output_dir(), "runs/x");
  EXPECT_EQ(c.engine.strategy, "fsdp2");
  EXPECT_EQ(c.engine.micro_batch_size_per_gpu, 4);
  // Typed at the boundary: every spelling becomes a dtype.
  EXPECT_EQ(c.engine.mixed_precision.param_dtype, c10::kBFloat16);
  EXPECT_EQ(c.engine.mixed_precision.reduce_dtype, c10::kFloat);
  EXPECT_EQ(c.engine.mixed_precision.buffer_dtype, c10::kFloat);
  EXPECT_EQ(c.engine.grad_scaler.enabled, ScalerMode::kAuto);
  EXPECT_EQ(c.engine.backend_options.at("bucket_mb"), ScalarValue(int64_t{25}));  // typed as written
  EXPECT_EQ(c.engine.backend_options.at("fast"), ScalarValue(true));
  EXPECT_DOUBLE_EQ(c.optim.lr, 1.0);  // an integer is accepted where a float is expected
  EXPECT_DOUBLE_EQ(c.optim.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(c.optim.clip_grad, 1.0);
  EXPECT_EQ(c.data.train_batch_size, 16);
  EXPECT_EQ(c.where("engine.strategy"), path + ":8:12");
}

TEST(TrainConfig, UnknownKeyNamesFileLineColumnAndAllowedKeys) {
  const auto path = write_config("unknown.toml", "[trainer]\ntotal_training_steps = 3\ntotal_trainig_steps = 4\n");
  const std::string e = error_of(path);
  EXPECT_NE(e.find(path + ":3:1"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'trainer.total_trainig_steps'"), std::string::npos) << e;
  EXPECT_NE(e.find("allowed:"), std::string::npos) << e;
  EXPECT_NE(e.find("total_training_steps"), std::string::npos) << e;

  const auto section = write_config("section.toml", "[trainr]\nx = 1\n");
  const std::string s = error_of(section);
  EXPECT_NE(s.find("unknown table [trainr]"), std::string::npos) << s;
  EXPECT_NE(s.find("[trainer]"), std::string::npos) << s;
}

TEST(TrainConfig, WrongTypeNamesPositionAndExpectedType) {
  const auto path = write_config("type.toml", "[data]\ntrain_batch_size = \"many\"\n");
  const std::string e = error_of(path);
  EXPECT_NE(e.find(path + ":2:20"), std::string::npos) << e;
  EXPECT_NE(e.find("data.train_batch_size: expected an integer, got a string"), std::string::npos) << e;
}

TEST(TrainConfig, BadPrecisionIsRejectedWithVerlMessage) {
  const auto path = write_config("dtype.toml", "[engine.mixed_precision]\nparam_dtype = \"FP16\"\n");
  const std::string e = error_of(path);
  EXPECT_NE(e.find(path + ":2:15"), std::string::npos) << e;
  EXPECT_NE(e.find("unexpected precision: FP16"), std::string::npos) << e;
  EXPECT_NE(e.find("bf16"), std::string::npos) << e;
}

// Values no run can use are refused up front, naming where they were set and the allowed range.
TEST(TrainConfig, ValuesOutOfRangeAreRefused) {
  const auto base = write_config("range.toml", "[trainer]\ntotal_training_steps = 3\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"optim.lr=nan", "optim.lr = nan is out of range (allowed: >= 0, finite)"},
      {"optim.lr=inf", "optim.lr = inf is out of range"},
      {"optim.min_lr_ratio=nan", "optim.min_lr_ratio = nan is out of range (allowed: 0..1)"},
      {"optim.betas=[0.9, 1.0]", "optim.betas = 1 is out of range (allowed: two numbers in [0, 1))"},
      {"optim.betas=[-0.1, 0.99]", "optim.betas = -0.1 is out of range"},
      {"optim.eps=-1e-8", "optim.eps = -1e-08 is out of range"},
      {"optim.weight_decay=-0.1", "optim.weight_decay = -0.1 is out of range"},
      {"optim.lr_warmup_steps_ratio=2", "optim.lr_warmup_steps_ratio = 2 is out of range"},
      {"engine.grad_scaler.init_scale=0", "engine.grad_scaler.init_scale = 0 is out of range"},
      {"engine.grad_scaler.backoff_factor=1.5", "engine.grad_scaler.backoff_factor = 1.5 is out of range"},
      {"engine.max_token_len_per_gpu=0", "engine.max_token_len_per_gpu must be positive"},
      {"trainer.collective_timeout_s=0", "trainer.collective_timeout_s = 0 is out of range (allowed: seconds, "
                                         "0.1..1e6 (default 600))"},
      {"trainer.collective_timeout_s=-5", "trainer.collective_timeout_s = -5 is out of range"},
      {"trainer.collective_timeout_s=nan", "trainer.collective_timeout_s = nan is out of range"},
      {"trainer.collective_timeout_s=inf", "trainer.collective_timeout_s = inf is out of range"},
      {"trainer.rendezvous_timeout_s=0", "trainer.rendezvous_timeout_s = 0 is out of range (allowed: seconds, "
                                         "0.1..1e6 (default 300))"},
      {"trainer.rendezvous_timeout_s=nan", "trainer.rendezvous_timeout_s = nan is out of range"},
  };
  for (const auto& [flag, message] : cases) {
    const std::string e = error_of(base, {flag});
    EXPECT_NE(e.find("--set " + flag + ": " + message), std::string::npos) << e;
  }
}

// Defaults that report a lost rank in minutes: torch's NCCL collective default and c10d's TCPStore default.
TEST(TrainConfig, CollectiveAndRendezvousTimeoutsAreSettingsWithMinuteDefaults) {
  const auto base = write_config("timeout.toml", "[trainer]\ntotal_training_steps = 3\n");
  EXPECT_EQ(load_train_config(base).trainer.collective_timeout_s, 600.0);
  EXPECT_EQ(load_train_config(base).trainer.rendezvous_timeout_s, 300.0);
  EXPECT_EQ(load_train_config(base, {"trainer.collective_timeout_s=2"}).trainer.collective_timeout_s, 2.0);
  EXPECT_EQ(load_train_config(base, {"trainer.rendezvous_timeout_s=3"}).trainer.rendezvous_timeout_s, 3.0);
  EXPECT_NE(to_toml(load_train_config(base)).find("collective_timeout_s = 600"), std::string::npos);
  EXPECT_NE(to_toml(load_train_config(base)).find("rendezvous_timeout_s = 300"), std::string::npos);
}

// Only a regular, non-empty file is a config: a directory or an empty file used to start a full default run, and
// a FIFO blocked open() forever.
TEST(TrainConfig, OnlyARegularNonEmptyFileIsAConfig) {
  const auto dir = std::filesystem::temp_directory_path() / ("enginery_cfg_dir_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_NE(error_of(dir.string()).find(dir.string() + ": not a regular file (allowed: a TOML config file)"),
            std::string::npos);
  const auto fifo = dir / "fifo.toml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of(fifo.string()).find("not a regular file"), std::string::npos);  // returns: never opened
  EXPECT_NE(error_of((dir / "absent.toml").string()).find("no such file"), std::string::npos);
  const auto empty = write_config("empty.toml", "# nothing but a comment\n");
  EXPECT_NE(error_of(empty).find(empty + ": the config file sets no key"), std::string::npos) << error_of(empty);
  std::filesystem::remove_all(dir);
}

TEST(TrainConfig, ClosedSetsAreTypedWithTheirPosition) {
  const auto scaler = write_config("scaler.toml", "[engine.grad_scaler]\nenabled = \"sometimes\"\n");
  const std::string e = error_of(scaler);
  EXPECT_NE(e.find("scaler.toml:2:11: engine.grad_scaler.enabled: unknown value 'sometimes'"), std::string::npos) << e;
  EXPECT_NE(e.find("allowed: auto, always, never"), std::string::npos) << e;
  const auto never = write_config("never.toml", "[engine.grad_scaler]\nenabled = \"never\"\n");
  EXPECT_EQ(load_train_config(never).engine.grad_scaler.enabled, ScalerMode::kNever);

  const auto model = write_config("model.toml", "[model]\npath = \"builtin:qwen9-huge\"\n");
  const std::string m = error_of(model);
  EXPECT_NE(m.find("model.toml:2:8: model.path: unknown built-in model 'builtin:qwen9-huge'"), std::string::npos) << m;
  EXPECT_NE(m.find("qwen2-tiny"), std::string::npos) << m;
  TrainConfig c = load_train_config(write_config("hf.toml", "[model]\npath = \"/models/qwen\"\n"));
  EXPECT_FALSE(c.model.source().is_builtin());
  EXPECT_EQ(c.model.source().name, "/models/qwen");
  EXPECT_EQ(TrainConfig{}.model.source().name, "qwen2-tiny");

  const auto dtype = write_config("model_dtype.toml", "[engine]\nmodel_dtype = \"bf16\"\n");
  EXPECT_EQ(load_train_config(dtype).engine.model_dtype, c10::kBFloat16);  // typed; the engine decides support
}

TEST(TrainConfig, DottedOverridesApplyAndNameTheFlagInErrors) {
  const auto path = write_config("base.toml", "[trainer]\ntotal_training_steps = 3\n");
  TrainConfig c = load_train_config(path, {"trainer.total_training_steps=50", "engine.mixed_precision.param_dtype=fp32",
                                           "data.train_files=some/file.jsonl", "optim.lr=2e-4",
                                           "trainer.experiment_name=\"quoted\""});
  EXPECT_EQ(c.trainer.total_training_steps, 50);
  EXPECT_EQ(c.engine.mixed_precision.param_dtype, c10::kFloat);
  EXPECT_EQ(c.data.train_files, "some/file.jsonl");
  EXPECT_DOUBLE_EQ(c.optim.lr, 2e-4);
  EXPECT_EQ(c.trainer.experiment_name, "quoted");

  const std::string wrong = error_of(path, {"trainer.save_freq=often"});
  EXPECT_NE(wrong.find("--set trainer.save_freq=often"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("expected an integer"), std::string::npos) << wrong;
  const std::string unknown = error_of(path, {"engine.bogus=1"});
  EXPECT_NE(unknown.find("--set engine.bogus=1: unknown key 'engine.bogus'"), std::string::npos) << unknown;
  EXPECT_NE(error_of(path, {"no_equals_sign"}).find("expected key=value"), std::string::npos);
}

// A section given a value (`--set trainer=5`, `engine = 1` in the file, a sub-table such as
// engine.mixed_precision) is named as a section with the form that sets its keys, and the keys it takes.
TEST(TrainConfig, AValueForASectionNamesTheSectionAndTheKeyForm) {
  const auto path = write_config("sections.toml", "[trainer]\ntotal_training_steps = 3\n");
  for (const std::string section : {"trainer", "engine", "engine.mixed_precision", "actor_rollout_ref"}) {
    const std::string e = error_of(path, {section + "=5"});
    EXPECT_NE(e.find("--set " + section + "=5: '" + section + "' is a section, not a key: set one of its keys, as " +
                     section + ".<key>=<value>"),
              std::string::npos)
        << e;
    EXPECT_EQ(e.find("unknown key"), std::string::npos) << e;
  }
  EXPECT_NE(error_of(path, {"trainer=5"}).find("total_training_steps"), std::string::npos);  // the keys it takes
  EXPECT_NE(error_of(path, {"engine.mixed_precision=5"}).find("param_dtype"), std::string::npos);
  const auto in_file = write_config("section_value.toml", "engine = 1\n[trainer]\ntotal_training_steps = 3\n");
  EXPECT_NE(error_of(in_file).find(in_file + ":1:1: 'engine' is a section"), std::string::npos) << error_of(in_file);
}

TEST(TrainConfig, OptionsForAnotherBackendAreAnError) {
  const auto path = write_config("backend.toml", "[engine]\nstrategy = \"fsdp\"\n[engine.veomni]\nx = 1\n");
  const std::string e = error_of(path);
  EXPECT_NE(e.find("engine.veomni"), std::string::npos) << e;
  EXPECT_NE(e.find("[engine.fsdp]"), std::string::npos) << e;
}

TEST(TrainConfig, EnumsAndRangesAreChecked) {
  const auto path = write_config("enum.toml", "[optim]\nlr_scheduler_type = \"linear\"\n");
  EXPECT_NE(error_of(path).find("allowed: constant, cosine"), std::string::npos);
  const auto zero = write_config("zero.toml", "[data]\ntrain_batch_size = 0\n");
  EXPECT_NE(error_of(zero).find("zero.toml:2:20: data.train_batch_size must be positive"), std::string::npos)
      << error_of(zero);
}

TEST(TrainConfig, ResolvedTomlReadsBackToTheSameConfig) {
  const auto path = write_config("round.toml", R"(
[trainer]
experiment_name = "round"
[engine]
strategy = "fsdp"
[engine.fsdp]
knob = "7"
[loss]
type = "ppo"
clip_ratio_high = 0.28
[checkpoint]
save_contents = ["model"]
)");
  TrainConfig c = load_train_config(path);
  const std::string text = to_toml(c);
  const auto again_path = write_config("again.toml", text);
  TrainConfig again = load_train_config(again_path);
  again.source = c.source;
  EXPECT_EQ(to_toml(again), text);
  EXPECT_EQ(again.engine.backend_options.at("knob"), ScalarValue(std::string("7")));
  EXPECT_EQ(again.loss.clip_ratio_high.value(), 0.28);
  EXPECT_FALSE(again.loss.clip_ratio_low.has_value());
  EXPECT_EQ(again.checkpoint.save_contents, std::vector<std::string>{"model"});
}

TEST(TrainConfig, ShippedExamplesParse) {
  for (const auto& entry : std::filesystem::directory_iterator(std::string(ENGINERY_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".toml") continue;
    EXPECT_NO_THROW(load_train_config(entry.path().string())) << entry.path();
  }
}

}  // namespace
}  // namespace enginery
