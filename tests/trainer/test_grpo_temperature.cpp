// GRPO's ratio and KL use the distribution the rollout sampled from (issue 41): with rollout.temperature = T the
// old, reference and new log-probs are those of softmax(logits / T), as verl passes rollout.temperature to its
// compute_log_prob, compute_ref_log_prob and update_actor. One whole GrpoStep runs on one rank in this process with
// test::ModelEngine (whose head honours the batch temperature, as the fsdp plugin's does); its recorded batches and
// grad norm are compared with an independent float64 computation from the model's hidden states. The engine's
// refusal when it cannot apply the temperature is checked against a registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine_driver/engine_access.h"
#include "host_api/error.h"
#include "models/kv_cache.h"
#include "models/model_factory.h"
#include "tests/trainer/model_engine.h"
#include "trainer/engine_factory.h"
#include "trainer/grpo/grpo_step.h"
#include "config/train_config.h"

namespace enginery {
namespace grpo {
namespace {

std::string config_file(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("enginery_grpo_temperature_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// One update per step (one mini-batch, one epoch), the KL loss on and an entropy bonus: from random weights every
// reward is 0, so the entropy term is what gives the update a gradient.
const char* kConfig = R"(
[algorithm]
adv_estimator = "grpo"

[data]
train_batch_size = 4
digits = 1

[engine]
micro_batch_size_per_gpu = 64

[rollout]
n = 2
response_length = 3
dtype = "fp32"

[actor]
ppo_mini_batch_size = 4
ppo_epochs = 1
use_kl_loss = true
kl_loss_coef = 0.5
entropy_coeff = 0.05
)";

// Per-token log-probs of each row's tokens (log_probs[b, t]: token t given the tokens before it; 0 at t = 0) and the
// entropy of each next-token distribution, in float64 at `temperature`, computed here from the model's hidden
// states and output embedding rather than by its log-prob head.
struct Float64LogProbs {
  torch::Tensor log_probs, entropy;  // [B, S] float64, differentiable in the model's parameters
};
Float64LogProbs float64_log_probs(models::CausalLM& model, const Batch& batch, double temperature) {
  const torch::Tensor ids = batch.at("input_ids");
  const int64_t b = ids.size(0), s = ids.size(1);
  models::KVCache cache(model.args(), b, s, torch::TensorOptions().dtype(torch::kDouble));
  const torch::Tensor hidden = model.forward_cached(ids, batch.at("attention_mask"), cache);
  const torch::Tensor logp = torch::log_softmax(
      torch::matmul(hidden, model.output_embedding_weight().t()) / temperature, -1);  // [B, S, V]: next token
  const torch::Tensor next = logp.narrow(1, 0, s - 1);
  Float64LogProbs out;
  out.log_probs = torch::zeros({b, s}, torch::kDouble);
  out.entropy = torch::zeros({b, s}, torch::kDouble);
  out.log_probs.narrow(1, 1, s - 1).copy_(next.gather(2, ids.narrow(1, 1, s - 1).unsqueeze(2)).squeeze(2));
  out.entropy.narrow(1, 1, s - 1).copy_(-(next.exp() * next).sum(2));
  return out;
}

// The engine's starting weights (the same model and seed), in float64.
std::shared_ptr<models::CausalLM> float64_model(const TrainConfig& c) {
  models::BuildOptions options;
  options.seed = c.engine.seed;
  auto model = std::dynamic_pointer_cast<models::CausalLM>(models::build_model(c.model, "language_model", options));
  model->to(torch::kDouble);
  return model;
}

// The grad norm of GRPO's first update (old = new = reference weights: the ratio is 1, inside the clip) in float64:
// -A * ratio for the policy term, kl_loss_coef * k3 and -entropy_coeff * entropy, each a token mean over loss_mask.
double float64_grad_norm(const TrainConfig& c, const Batch& batch, double temperature) {
  auto model = float64_model(c);
  const Float64LogProbs f = float64_log_probs(*model, batch, temperature);
  const torch::Tensor mask = batch.at("loss_mask").to(torch::kDouble);
  const torch::Tensor advantages = batch.at("advantages").to(torch::kDouble);
  const torch::Tensor fixed = f.log_probs.detach();
  const torch::Tensor ratio = (f.log_probs - fixed).exp();
  const torch::Tensor k3 = (fixed - f.log_probs).exp() - (fixed - f.log_probs) - 1.0;
  const double tokens = mask.sum().item<double>();
  const torch::Tensor loss = ((-advantages * ratio + c.actor.kl_loss_coef * k3 - c.actor.entropy_coeff * f.entropy) *
                              mask).sum() / tokens;
  loss.backward();
  double sum = 0.0;
  for (const auto& p : model->parameters()) sum += p.grad().pow(2).sum().item<double>();
  return std::sqrt(sum);
}

// The padded rows of a packed micro-batch that came through the host loop's padded edge (engine_driver/
// padded_edge.h): its attention_mask and loss inputs ride along per sequence; input_ids and loss_mask go back to
// the real tokens' places.
Batch padded_rows(const Batch& packed) {
  Batch out;
  for (const auto& [name, t] : packed.tensors()) {
    if (name != "cu_seqlens" && name != "input_ids" && name != "loss_mask") out.set(name, t);
  }
  const torch::Tensor valid = packed.at("attention_mask").to(torch::kBool);
  out.set("input_ids", torch::zeros(valid.sizes(), torch::kLong).masked_scatter(valid, packed.at("input_ids")));
  out.set("loss_mask", torch::zeros(valid.sizes(), torch::kFloat)
                           .masked_scatter(valid, packed.at("loss_mask").to(torch::kFloat)));
  return out;
}

double max_difference_on_targets(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).abs() * mask.to(torch::kDouble)).max().item<double>();
}

TEST(GrpoTemperature, OldReferenceAndNewLogProbsAreThoseOfTheSamplingDistribution) {
  const double temperature = 0.7;
  const TrainConfig c = load_train_config(config_file("grpo.toml", kConfig),
                                          {"rollout.temperature=" + std::to_string(temperature)});
  test::ModelEngine engine(c.model, c.engine);
  // Built without the registry: declare what its registration would (the engine scales its logits by T).
  EngineAccess::declared(engine).temperature = true;
  GrpoStep step(c, engine, {}, torch::kCPU, 0, 1);
  const auto train = open_dataset(c.data.train_files, "train", c.data.max_length, c.data.digits, c.data.train_size,
                                  static_cast<uint64_t>(c.data.seed));
  std::vector<Example> examples;
  for (int64_t i = 0; i < c.data.train_batch_size; ++i) examples.push_back(train->get(i));
  const StepRecord result = step.run(1, examples);

  // One infer_batch (old log-probs) and one train_batch micro-batch, both told the rollout's temperature.
  ASSERT_EQ(engine.calls().size(), 2u);
  ASSERT_TRUE(engine.calls()[0].forward_only);
  ASSERT_FALSE(engine.calls()[1].forward_only);
  for (const auto& call : engine.calls()) EXPECT_DOUBLE_EQ(batch_temperature(call.batch), temperature);
  const Batch trained = padded_rows(engine.calls()[1].batch);
  const torch::Tensor& mask = trained.at("loss_mask");

  // The old and reference log-probs the loss read, against float64 at T (the weights are the initial ones: the
  // engine's optimizer_step does not move them).
  auto model64 = float64_model(c);
  const auto [at_t, at_1] = [&] {
    torch::NoGradGuard no_grad;
    return std::pair{float64_log_probs(*model64, trained, temperature), float64_log_probs(*model64, trained, 1.0)};
  }();
  ASSERT_GT(max_difference_on_targets(at_t.log_probs, at_1.log_probs, mask), 1e-2) << "T = 0.7 changes nothing";
  EXPECT_LT(max_difference_on_targets(trained.at("old_log_probs"), at_t.log_probs, mask), 1e-5);
  EXPECT_LT(max_difference_on_targets(trained.at("ref_log_probs"), at_t.log_probs, mask), 1e-5);
  const double entropy = (at_t.entropy * mask.to(torch::kDouble)).sum().item<double>() / mask.sum().item<double>();
  EXPECT_NEAR(result.metrics.at("actor/entropy"), entropy, 1e-5 * entropy);
  // The same distribution on both sides of the ratio and the KL: nothing to clip, no divergence.
  EXPECT_LT(std::abs(result.metrics.at("actor/ppo_kl")), 1e-6);
  EXPECT_LT(std::abs(result.metrics.at("actor/kl_loss")), 1e-6);

  // The update's gradient is that of the loss at T, not at 1.
  const double expected = float64_grad_norm(c, trained, temperature);
  const double at_one = float64_grad_norm(c, trained, 1.0);
  ASSERT_EQ(engine.grad_norms().size(), 1u);
  const double got = engine.grad_norms()[0];
  EXPECT_NEAR(got, expected, 1e-4 * expected) << "float64 at T = 1 gives " << at_one;
  EXPECT_GT(std::abs(expected - at_one), 1e-2 * expected) << "the test cannot tell T = 0.7 from T = 1";
  EXPECT_DOUBLE_EQ(result.metrics.at("actor/grad_norm"), got);
}

// An engine that does not apply a batch temperature would compute every log-prob at 1 whatever rollout.temperature
// says: refused before launch, naming the key and the engine, unless the temperature is 1.
TEST(GrpoTemperature, AnEngineWithoutTheCapabilityIsRefusedUnlessTheTemperatureIsOne) {
  auto registry_with = [](std::vector<std::string> capabilities) {
    auto registry = std::make_unique<EngineRegistry>();
    EngineRegistration r;
    r.key = {"language_model", "fsdp", "cpu"};
    r.factory = [](const EngineArgs&) -> std::shared_ptr<BaseEngine> { return nullptr; };
    r.origin = {"plain", "/plugins/plain/plugin.toml"};
    r.traits.capabilities.temperature =
        std::find(capabilities.begin(), capabilities.end(), "temperature") != capabilities.end();
    registry->register_engine(std::move(r));
    return registry;
  };
  const std::string path = config_file("capability.toml", kConfig);
  auto refusal = [&](const EngineRegistry& registry, const std::string& temperature) {
    try {
      check_engine_available(registry, {}, load_train_config(path, {"rollout.temperature=" + temperature}), "cpu", 1);
    } catch (const EngineryError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto plain = registry_with({});
  EXPECT_EQ(refusal(*plain, "0.7"),
            "--set rollout.temperature=0.7: rollout.temperature = 0.7: GRPO computes its log-probs at the rollout's "
            "temperature, and engine (language_model, fsdp, cpu) (plugin 'plain' (/plugins/plain/plugin.toml)) does "
            "not apply one (it does not declare the capability 'temperature') (allowed: rollout.temperature = 1, or an "
            "engine whose plugin declares the capability 'temperature')");
  EXPECT_EQ(refusal(*plain, "1"), "no error");
  EXPECT_EQ(refusal(*registry_with({"temperature"}), "0.7"), "no error");
}

}  // namespace
}  // namespace grpo
}  // namespace enginery
