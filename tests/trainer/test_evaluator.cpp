// The evaluator never scores a broken forward: a model whose log-probs are NaN (a plugin built against older
// headers did this) was scored "100% exact match". Here the engine is the one-rank ModelEngine with NaN injected
// into its final norm, so every log-prob it gives is NaN; and end to end, `enginery train` on a checkpoint with
// that NaN weight.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "support/torch_compat.h"
#include "tests/support/shell_command.h"
#include "tests/trainer/model_engine.h"
#include "trainer/data/dataset.h"
#include "trainer/loop/evaluator.h"

namespace enginery {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_model() {
  ModelConfig model;
  model.path = "builtin:qwen2-tiny";
  return model;
}

EngineConfig one_call_per_batch() {
  EngineConfig engine;
  engine.micro_batch_size_per_gpu = 8;
  return engine;
}

void poison(models::CausalLM& model) {
  torch::NoGradGuard no_grad;
  model.named_parameters()["model.norm.weight"].fill_(NAN);
}

EvalContext context_of(BaseEngine& engine) {
  EvalContext ctx;
  ctx.engine = &engine;
  ctx.rows_per_call = 8;
  return ctx;
}

TEST(Evaluator, NonFiniteLogProbsFailTheirSequencesAndAreCounted) {
  test::ModelEngine engine(tiny_model(), one_call_per_batch());
  poison(engine.model());
  const AdditionTask task(1, 1);
  const EvalResult r = evaluate_addition(context_of(engine), task, 12);
  EXPECT_EQ(r.total, 12);
  EXPECT_EQ(r.correct, 0) << "a NaN forward scored as a match";
  EXPECT_EQ(r.accuracy, 0.0);
  EXPECT_EQ(r.nonfinite, 12);
  EXPECT_TRUE(std::isnan(r.val_loss)) << r.val_loss;
  EXPECT_EQ(nonfinite_note(r),
            "12 of 12 held-out sequences gave non-finite log-probs (NaN or inf): counted wrong, val_loss nan");
  ASSERT_FALSE(r.samples.empty());
  EXPECT_NE(r.samples[0].find("failed: non-finite log-probs"), std::string::npos) << r.samples[0];

  const auto val = open_dataset("builtin:addition", "val", 64, 1, 5, 1);
  const EvalResult loss = evaluate_loss(context_of(engine), *val);
  EXPECT_EQ(loss.total, 5);
  EXPECT_EQ(loss.nonfinite, 5);
  EXPECT_TRUE(std::isnan(loss.val_loss)) << loss.val_loss;
}

// The same model without the NaN: nothing counted, nothing noted.
TEST(Evaluator, AFiniteModelHasNoNonFiniteSequences) {
  test::ModelEngine engine(tiny_model(), one_call_per_batch());
  const EvalResult r = evaluate_addition(context_of(engine), AdditionTask(1, 1), 12);
  EXPECT_EQ(r.total, 12);
  EXPECT_EQ(r.nonfinite, 0);
  EXPECT_TRUE(std::isfinite(r.val_loss)) << r.val_loss;
  EXPECT_EQ(nonfinite_note(r), "");
}

// `enginery train` from a checkpoint whose final norm is NaN: every evaluation names the failure, records it in
// metrics.jsonl, and scores 0 of 12; the run goes on, as verl's validation reports its metrics and its actor skips a
// step whose grad norm is not finite.
TEST(Evaluator, ATrainingRunOnANaNModelReportsTheFailureAndScoresNothing) {
  const fs::path dir = fs::temp_directory_path() / ("enginery_eval_nan_" + std::to_string(getpid()));
  compat::remove_all(dir);
  fs::create_directories(dir);
  {
    test::ModelEngine engine(tiny_model(), one_call_per_batch());
    poison(engine.model());
    models::save_hf(engine.model(), (dir / "model").string());
  }
  const fs::path out = dir / "run";
  const test_support::CommandResult r = test_support::run_shell(
      std::string(ENGINERY_EXE) + " train --config " + ENGINERY_SOURCE_DIR + "/examples/demo.toml --plugin-dir " +
      ENGINERY_PLUGIN_DIR + " --nproc 1 --set model.path=" + (dir / "model").string() +
      " --set trainer.default_local_dir=" + out.string() +
      " --set data.digits=1 --set data.val_size=12 --set data.train_batch_size=8 --set trainer.total_training_steps=1"
      " --set trainer.test_freq=1 --set trainer.save_freq=-1 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("exact match 0.0% (0/12 held-out)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("warning: eval step 1: 12 of 12 held-out sequences gave non-finite log-probs (NaN or inf): "
                          "counted wrong, val_loss nan"),
            std::string::npos)
      << r.output;
  int evals = 0;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string text; std::getline(in, text);) {
    const auto line = nlohmann::json::parse(text);
    if (!line.contains("accuracy")) continue;
    ++evals;
    EXPECT_EQ(line["accuracy"].get<double>(), 0.0) << line;
    EXPECT_EQ(line["nonfinite_sequences"].get<int64_t>(), 12) << line;
    EXPECT_TRUE(line["val_loss"].is_null()) << line;
  }
  EXPECT_EQ(evals, 2);  // before training and after step 1
  if (!HasFailure()) compat::remove_all(dir);
}

}  // namespace
}  // namespace enginery
