// State checks: save -> load restores parameters, optimizer, scheduler and scaler state exactly (the next step is
// bit-identical, in the same engine and in a fresh one), to(cpu) -> to(device) leaves the engine as it was, and
// the mode guards with offload_outside_modes change nothing but where the state waits, and get_per_tensor_param
// yields Hugging Face names, shapes and the values of the checkpoint the engine loaded. An engine declaring
// "train-state" exposes its parameter and gradient pieces as views (host_api/exports.h) whose gradient is the one
// optimizer_step measures, and hyperparameters whose writes steer the next step.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "conformance/data.h"
#include "conformance/engine_setup.h"
#include "conformance/hf_fixture.h"
#include "conformance/target.h"
#include "host_api/error.h"
#include "engine_driver/mode_offload.h"
#include "host_api/exports.h"
#include "engine_driver/step_loop.h"
#include "engine_driver/mode_guard.h"

namespace enginery {
namespace conformance {
namespace {

struct StepResult {
  ParamList params;
  double loss = 0, grad_norm = 0, lr = 0;
  double scale = 0;
  int64_t growth_tracker = -1;
};

StepResult scaler_state(BaseEngine& engine, StepResult result = {}) {
  if (GradScaler* scaler = engine.grad_scaler()) {
    result.scale = scaler->current_scale();
    result.growth_tracker = scaler->growth_tracker();
  }
  return result;
}

StepResult step(BaseEngine& engine, const Batch& batch, const LossFn& loss) {
  BatchOutput out = train_batch(engine, batch, loss);
  StepResult result;
  result.loss = out.loss.item<double>();
  result.grad_norm = out.grad_norm.item<double>();
  result.lr = out.lr;
  result.params = read_params(engine);
  return scaler_state(engine, std::move(result));
}

void expect_same_step(const StepResult& got, const StepResult& want, const std::string& what) {
  EXPECT_EQ(diff_params(got.params, want.params), "") << what << ": parameters";
  EXPECT_EQ(got.loss, want.loss) << what << ": loss";
  EXPECT_EQ(got.grad_norm, want.grad_norm) << what << ": grad norm";
  EXPECT_EQ(got.lr, want.lr) << what << ": lr (scheduler state)";
  EXPECT_EQ(got.scale, want.scale) << what << ": grad scaler scale";
  EXPECT_EQ(got.growth_tracker, want.growth_tracker) << what << ": grad scaler growth tracker";
}

void check_checkpoint(const Target& target) {
  EngineSpec spec;
  spec.lr_scheduler = "cosine";  // warmup then decay: a scheduler that forgot its step shows in the lr
  spec.lr_warmup_steps = 2;
  spec.total_training_steps = 10;
  const bool scaled = target.has("grad-scaler");
  if (scaled) spec.grad_scaler = ScalerMode::kAlways;  // a scaler in fp32, so its state can be checked on any device
  auto engine = make_engine(target, spec);
  if (scaled) ASSERT_NE(engine->grad_scaler(), nullptr) << "grad_scaler.enabled = \"always\" gave no scaler";
  const Batch batch = make_batch(target);
  const Batch next_batch = make_batch(target, 4, 16, 777);
  const LossFn loss = token_mean_loss(target);

  step(*engine, batch, loss);
  if (scaled) step(*engine, batch, scaled_loss(loss, std::numeric_limits<double>::quiet_NaN()));  // scale backs off
  step(*engine, batch, loss);
  const StepResult saved = scaler_state(*engine, StepResult{read_params(*engine)});
  const std::string path = fresh_scratch_path("checkpoint");
  engine->save_checkpoint(path, /*global_step=*/3, /*max_ckpt_to_keep=*/1);
  const StepResult next = step(*engine, next_batch, loss);
  ASSERT_NE(diff_params(next.params, saved.params), "") << "the step after saving changed nothing";

  engine->load_checkpoint(path);
  StepResult loaded = scaler_state(*engine, StepResult{read_params(*engine)});
  EXPECT_EQ(diff_params(loaded.params, saved.params), "") << "load_checkpoint into the same engine: parameters";
  EXPECT_EQ(loaded.scale, saved.scale) << "same engine: grad scaler scale";
  EXPECT_EQ(loaded.growth_tracker, saved.growth_tracker) << "same engine: growth tracker";
  expect_same_step(step(*engine, next_batch, loss), next, "the step after loading into the same engine");

  auto fresh = make_engine(target, spec);
  fresh->load_checkpoint(path);
  loaded = scaler_state(*fresh, StepResult{read_params(*fresh)});
  EXPECT_EQ(diff_params(loaded.params, saved.params), "") << "load_checkpoint into a fresh engine: parameters";
  EXPECT_EQ(loaded.scale, saved.scale) << "fresh engine: grad scaler scale";
  EXPECT_EQ(loaded.growth_tracker, saved.growth_tracker) << "fresh engine: growth tracker";
  expect_same_step(step(*fresh, next_batch, loss), next, "the step after loading into a fresh engine");
}

// Two engines of one spec take the same first step; one then sends its whole state to the CPU and back (on a GPU
// target, a step in between must be refused). Their next steps must be bitwise equal.
void check_offload(const Target& target) {
  EngineSpec spec;
  auto moved = make_engine(target, spec);
  auto stayed = make_engine(target, spec);
  const Batch batch = make_batch(target);
  const Batch next_batch = make_batch(target, 4, 16, 777);
  const LossFn loss = token_mean_loss(target);
  expect_same_step(step(*moved, batch, loss), step(*stayed, batch, loss), "the first step of two equal engines");

  const torch::Device home(target.key.device);
  moved->to(torch::kCPU);
  if (!home.is_cpu()) {
    EXPECT_THROW(train_batch(*moved, next_batch, loss), EngineryError) << "a step while offloaded to cpu ran";
  }
  moved->to(home);
  expect_same_step(step(*moved, next_batch, loss), step(*stayed, next_batch, loss), "the step after to(cpu) -> to(" +
                                                                                        home.str() + ")");
  // Parts one at a time, in another order, and a second round trip.
  moved->to(torch::kCPU, /*model=*/false, /*optimizer=*/true, /*grad=*/false);
  moved->to(torch::kCPU, /*model=*/true, /*optimizer=*/false, /*grad=*/true);
  moved->to(home);
  expect_same_step(step(*moved, batch, loss), step(*stayed, batch, loss), "the step after a part-by-part round trip");
}

// [engine.<backend>] offload_outside_modes: outside the mode guards the state is on the host (on a
// GPU target a bare step is refused), train_mode() brings it for a step, infer_batch's own eval mode for a forward,
// and every step and log-prob equals an engine without the option.
void check_offload_modes(const Target& target) {
  EngineSpec spec;
  spec.adjust = [](EngineArgs& args) { args.engine.backend_options[kOffloadOutsideModes] = true; };
  auto moving = make_engine(target, spec);
  auto stayed = make_engine(target, EngineSpec{});
  const LossFn loss = token_mean_loss(target);
  const Batch batch = make_batch(target);
  if (!torch::Device(target.key.device).is_cpu()) {
    EXPECT_THROW(train_batch(*moving, batch, loss), EngineryError) << "a step outside the modes ran on the device";
  }
  for (const Batch& b : {batch, make_batch(target, 4, 16, 777)}) {
    StepResult got;
    {
      auto mode = train_mode(*moving);
      got = step(*moving, b, loss);
    }
    expect_same_step(got, step(*stayed, b, loss), "a step in train_mode() with offload_outside_modes");
    const BatchOutput inferred = infer_batch(*moving, b, loss), want = infer_batch(*stayed, b, loss);
    EXPECT_EQ(inferred.loss.item<double>(), want.loss.item<double>()) << "infer_batch with offload_outside_modes";
  }
}

void check_hf_names(const Target& target) {
  const HfFixture fixture = write_qwen2_fixture(fresh_scratch_path("hf-qwen2"));
  Target from_file = target;
  from_file.model_path = fixture.dir;
  auto engine = make_engine(from_file, EngineSpec{});
  const ParamList got = read_params(*engine);

  std::map<std::string, torch::Tensor> by_name;
  for (const auto& [name, tensor] : got) {
    EXPECT_TRUE(by_name.emplace(name, tensor).second) << "'" << name << "' is yielded twice";
  }
  std::set<std::string> expected;
  for (const auto& [name, tensor] : fixture.tensors) {
    if (target.value_model() && name == "lm_head.weight") continue;  // a value model has its own head
    expected.insert(name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      ADD_FAILURE() << "get_per_tensor_param does not yield '" << name << "'";
      continue;
    }
    EXPECT_EQ(it->second.sizes(), tensor.sizes()) << name;
    if (it->second.sizes() == tensor.sizes()) {
      EXPECT_TRUE(torch::equal(it->second.to(torch::kFloat), tensor))
          << name << " does not hold the loaded value: max diff " << max_abs_diff(it->second, tensor);
    }
  }
  std::vector<std::string> extra;
  for (const auto& [name, tensor] : by_name) {
    if (expected.count(name) == 0) extra.push_back(name);
  }
  if (!target.value_model()) {
    EXPECT_TRUE(extra.empty()) << "names that are not in the Hugging Face checkpoint, first: '" << extra.front()
                               << "'";
    return;
  }
  // The value head is new: one value per token, so its weight has one output row.
  ASSERT_FALSE(extra.empty()) << "a value model yields no head parameter";
  for (const std::string& name : extra) {
    EXPECT_EQ(by_name[name].size(0), 1) << "value head parameter '" << name << "' has " << by_name[name].sizes();
  }
}

void check_train_state(const Target& target) {
  EngineSpec spec;
  spec.clip_grad = 1e9;  // the norm reported is the one before clipping either way; no clip keeps the step plain
  auto engine = make_engine(target, spec);
  BaseEngine* state = engine.get();  // declared 'train-state': BaseEngine's refusing default fails the check
  std::map<std::string, torch::Tensor> full;
  for (const auto& [name, t] : read_params(*engine)) full[name] = t.to(torch::kFloat).reshape({-1});

  forward_backward_batch(*engine, make_batch(target), token_mean_loss(target), /*forward_only=*/false);
  double grad_sq = 0;
  size_t seen = 0;
  for (const LocalParameter& piece : state->local_parameters()) {
    ASSERT_TRUE(full.count(piece.name)) << "'" << piece.name << "' is not a name get_per_tensor_param gives";
    ++seen;
    const auto want = full.at(piece.name).narrow(0, piece.flat_offset, piece.param.numel());
    EXPECT_TRUE(torch::equal(piece.param.to(torch::kCPU, torch::kFloat), want)) << piece.name;
    ASSERT_TRUE(piece.grad.defined()) << "'" << piece.name << "' has no gradient after a backward";
    grad_sq += piece.grad.to(torch::kDouble).pow(2).sum().item<double>();
  }
  EXPECT_EQ(seen, full.size()) << "pieces";
  const double norm = engine->optimizer_step().item<double>();
  EXPECT_NEAR(std::sqrt(grad_sq), norm, 1e-5 * norm) << "the gradient pieces are not what optimizer_step measured";

  // lr 0 and no weight decay: a step that changes nothing, bitwise; the betas and eps read back as written.
  OptimizerHyperparameters h = state->optimizer_hyperparameters();
  EXPECT_DOUBLE_EQ(h.lr, spec.lr);
  h.lr = 0.0;
  h.weight_decay = 0.0;
  h.beta1 = 0.8;
  h.eps = 1e-7;
  state->set_optimizer_hyperparameters(h);
  const OptimizerHyperparameters back = state->optimizer_hyperparameters();
  EXPECT_EQ(std::make_tuple(back.lr, back.beta1, back.eps, back.weight_decay), std::make_tuple(0.0, 0.8, 1e-7, 0.0));
  const ParamList before = read_params(*engine);
  train_batch(*engine, make_batch(target), token_mean_loss(target));
  EXPECT_EQ(diff_params(read_params(*engine), before), "") << "a step at lr 0 without weight decay";
  h.beta2 = 1.0;
  EXPECT_THROW(state->set_optimizer_hyperparameters(h), EngineryError) << "beta2 = 1 accepted";

  // A write through a parameter piece is a write to the model.
  LocalParameter first = state->local_parameters().front();
  torch::NoGradGuard no_grad;
  first.param.add_(1.0);
  const auto after = read_params(*engine);
  for (const auto& [name, t] : after) {
    if (name == first.name) {
      EXPECT_TRUE(torch::equal(t.to(torch::kFloat).reshape({-1}).narrow(0, first.flat_offset, first.param.numel()),
                               first.param.to(torch::kCPU)))
          << "a write through '" << name << "' did not reach the model";
    }
  }
}

}  // namespace

void add_state_checks(std::vector<Check>& checks) {
  checks.push_back({"checkpoint_roundtrip",
                    "save -> load restores params, optimizer, scheduler and scaler state; the next step is identical",
                    requires_precisions({"fp32"}, {"checkpoint-same-world"}), check_checkpoint});
  checks.push_back({"offload_roundtrip",
                    "to(cpu) -> to(device) leaves the engine exactly as it was: the next steps are identical",
                    requires_precisions({"fp32"}, {"offload"}), check_offload});
  checks.push_back({"offload_outside_modes",
                    "with engine.<backend>.offload_outside_modes the mode guards move the state; steps are identical",
                    requires_precisions({"fp32"}, {"offload-modes"}), check_offload_modes});
  checks.push_back({"hf_parameter_names", "get_per_tensor_param yields the HF names, shapes and loaded values",
                    requires_precisions({"fp32"}), check_hf_names});
  checks.push_back({"train_state",
                    "local parameter and gradient pieces are the engine's own; optimizer hyperparameters steer a step",
                    requires_precisions({"fp32"}, {"train-state"}), check_train_state});
}

}  // namespace conformance
}  // namespace enginery
