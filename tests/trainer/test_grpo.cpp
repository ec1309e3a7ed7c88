// GRPO's pure parts against float64 formulas and hand-computed values (verl's compute_grpo_outcome_advantage,
// kl_penalty and the clipped policy loss), the rollout's batch layout, and its configuration keys in both
// spellings. The parts that sample (a whole step) are exercised end to end in test_grpo_e2e.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "host_api/error.h"
#include "trainer/grpo/advantages.h"
#include "trainer/grpo/grpo_loss.h"
#include "trainer/grpo/kl.h"
#include "trainer/grpo/rollout_data.h"
#include "trainer/grpo/rollout_settings.h"
#include "trainer/grpo/step_plan.h"
#include "trainer/preflight.h"
#include "config/train_config.h"

namespace enginery {
namespace grpo {
namespace {

constexpr double kEps = kAdvantageEpsilon;

std::vector<double> values_of(const torch::Tensor& t) {
  const torch::Tensor d = t.to(torch::kDouble).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

TEST(GrpoAdvantages, MatchHandComputedGroupStatistics) {
  // Three groups of 4: mixed (mean 1/2, unbiased std sqrt(1/3)), all equal (std 0), one success in four
  // (mean 1/4, unbiased std 1/2).
  const torch::Tensor scores = torch::tensor({1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0},
                                             torch::kDouble);
  const auto adv = values_of(group_advantages(scores, 4, /*norm_by_std=*/true));
  const double s1 = std::sqrt(1.0 / 3.0);
  const std::vector<double> expected = {0.5 / (s1 + kEps), -0.5 / (s1 + kEps), -0.5 / (s1 + kEps), 0.5 / (s1 + kEps),
                                        0.0, 0.0, 0.0, 0.0,
                                        -0.25 / (0.5 + kEps), -0.25 / (0.5 + kEps), -0.25 / (0.5 + kEps),
                                        0.75 / (0.5 + kEps)};
  ASSERT_EQ(adv.size(), expected.size());
  for (size_t i = 0; i < adv.size(); ++i) EXPECT_NEAR(adv[i], expected[i], 1e-6) << i;
}

TEST(GrpoAdvantages, AllEqualRewardsGiveZeroNotNaN) {
  for (double value : {0.0, 1.0, 0.37}) {
    const auto adv = values_of(group_advantages(torch::full({8}, value, torch::kDouble), 8, true));
    for (double a : adv) {
      EXPECT_TRUE(std::isfinite(a));
      EXPECT_EQ(a, 0.0);
    }
  }
}

TEST(GrpoAdvantages, WithoutStdOnlyCentresAndGroupsOfOneKeepTheirScore) {
  const torch::Tensor scores = torch::tensor({3.0, 1.0, 2.0, 2.0}, torch::kDouble);
  const auto centred = values_of(group_advantages(scores, 2, /*norm_by_std=*/false));
  EXPECT_NEAR(centred[0], 1.0, 1e-7);
  EXPECT_NEAR(centred[1], -1.0, 1e-7);
  EXPECT_EQ(centred[2], 0.0);
  EXPECT_EQ(centred[3], 0.0);
  // verl: a group of one has mean 0 and std 1.
  const auto single = values_of(group_advantages(scores, 1, true));
  for (size_t i = 0; i < single.size(); ++i) EXPECT_NEAR(single[i], values_of(scores)[i] / (1.0 + kEps), 1e-6);
  EXPECT_THROW(group_advantages(scores, 3, true), EngineryError);
}

// KL estimators against their float64 definitions, including log-ratios past verl's clamps.
double k3_reference(double lp, double ref) {
  const double kl = std::min(std::max(ref - lp, -20.0), 20.0);
  return std::min(std::max(std::exp(kl) - kl - 1.0, -10.0), 10.0);
}

TEST(GrpoKl, EstimatorsMatchFloat64Formulas) {
  torch::manual_seed(11);
  torch::Tensor lp = -torch::rand({3, 7}, torch::kDouble) * 4;
  torch::Tensor ref = lp + 0.7 * torch::randn({3, 7}, torch::kDouble);
  ref[0][0] = lp[0][0].item<double>() + 30.0;  // exp would be huge: k3 clamps
  ref[0][1] = lp[0][1].item<double>() - 30.0;
  const auto l = values_of(lp), r = values_of(ref);
  for (const std::string name : {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"}) {
    const KlType type = kl_type_from(name);
    const auto got = values_of(kl_penalty(lp.to(torch::kFloat), ref.to(torch::kFloat), type));
    for (size_t i = 0; i < l.size(); ++i) {
      const double d = l[i] - r[i];
      double want = 0;
      switch (type) {
        case KlType::kK1: want = d; break;
        case KlType::kAbs: want = std::abs(d); break;
        case KlType::kK2: want = 0.5 * d * d; break;
        case KlType::kK3: want = k3_reference(l[i], r[i]); break;
      }
      EXPECT_NEAR(got[i], want, 1e-4 * std::max(1.0, std::abs(want))) << name << " at " << i;
    }
  }
  EXPECT_EQ(values_of(kl_penalty(lp, ref, KlType::kK3))[0], 10.0);
  EXPECT_THROW(kl_type_from("full"), EngineryError);
}

struct PolicyData {
  torch::Tensor lp, old, ref, entropy, adv, mask;
};

PolicyData sample_policy_data(int64_t b, int64_t t) {
  torch::manual_seed(5);
  PolicyData d;
  d.lp = -torch::rand({b, t}, torch::kDouble) * 3;
  d.old = d.lp + 0.3 * torch::randn({b, t}, torch::kDouble);  // ratios on both sides of [0.8, 1.28]
  d.ref = d.lp + 0.5 * torch::randn({b, t}, torch::kDouble);
  d.entropy = torch::rand({b, t}, torch::kDouble) * 2;
  // One advantage per row, as GRPO's, spread over the row's response tokens.
  d.adv = torch::randn({b, 1}, torch::kDouble).expand({b, t}).contiguous();
  d.mask = (torch::rand({b, t}) > 0.25).to(torch::kFloat);
  d.mask.select(1, 0).zero_();
  return d;
}

// verl's token-mean policy loss, written out per token in float64.
double policy_loss_reference(const PolicyData& d, const PolicyLossOptions& o, double global_tokens) {
  const auto lp = values_of(d.lp), old = values_of(d.old), ref = values_of(d.ref), ent = values_of(d.entropy),
             adv = values_of(d.adv), mask = values_of(d.mask);
  double total = 0;
  for (size_t i = 0; i < lp.size(); ++i) {
    if (mask[i] == 0) continue;
    const double ratio = std::exp(std::min(std::max(lp[i] - old[i], -20.0), 20.0));
    const double clipped_ratio = std::min(std::max(ratio, 1.0 - o.clip_low), 1.0 + o.clip_high);
    double pg = std::max(-adv[i] * ratio, -adv[i] * clipped_ratio);
    if (adv[i] < 0) pg = std::min(pg, -adv[i] * o.clip_c);
    total += pg + o.kl_coef * k3_reference(lp[i], ref[i]) - o.entropy_coeff * ent[i];
  }
  return total / global_tokens;
}

Batch policy_batch(const PolicyData& d) {
  Batch b;
  b.set("loss_mask", d.mask);
  b.set("old_log_probs", d.old.to(torch::kFloat));
  b.set("ref_log_probs", d.ref.to(torch::kFloat));
  b.set("advantages", d.adv.to(torch::kFloat));
  return b;
}

TEST(GrpoPolicyLoss, ClipLowHighKlAndEntropyMatchFloat64) {
  const PolicyData d = sample_policy_data(6, 11);
  PolicyLossOptions o;
  o.clip_low = 0.2;
  o.clip_high = 0.28;
  o.clip_c = 3.0;
  o.use_kl = true;
  o.kl_coef = 0.1;
  o.kl_type = KlType::kK3;
  o.entropy_coeff = 0.01;
  const double tokens = d.mask.sum().item<double>();
  LossContext ctx;
  ctx.global_num_tokens = tokens;
  ModelOutput out;
  out.log_probs = d.lp.to(torch::kFloat);
  out.entropy = d.entropy.to(torch::kFloat);
  const LossResult r = policy_loss(out, policy_batch(d), ctx, o);
  EXPECT_NEAR(r.loss.item<double>(), policy_loss_reference(d, o, tokens), 1e-5);
  for (const char* name : {"pg_loss", "pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "kl_loss", "entropy_loss"}) {
    EXPECT_TRUE(r.metrics.count(name)) << name;
  }
  const double clipfrac = r.metrics.at("pg_clipfrac").item<double>();
  EXPECT_GT(clipfrac, 0.0);  // the data reaches both clip bounds
  EXPECT_LT(clipfrac, 1.0);

  // Without KL and entropy it is the offline PPO loss; the asymmetric bounds matter.
  PolicyLossOptions plain = o;
  plain.use_kl = false;
  plain.entropy_coeff = 0.0;
  plain.kl_coef = 0.0;
  EXPECT_NEAR(policy_loss(out, policy_batch(d), ctx, plain).loss.item<double>(),
              policy_loss_reference(d, plain, tokens), 1e-5);
  PolicyLossOptions symmetric = plain;
  symmetric.clip_high = 0.2;
  EXPECT_GT(std::abs(policy_loss_reference(d, symmetric, tokens) - policy_loss_reference(d, plain, tokens)), 1e-6);

  // Split into two micro-batches with the global count, the parts sum to the whole (host_api/loss.h).
  double parts = 0;
  for (int64_t begin : {0, 3}) {
    ModelOutput o2;
    o2.log_probs = out.log_probs.slice(0, begin, begin + 3);
    o2.entropy = out.entropy.slice(0, begin, begin + 3);
    parts += policy_loss(o2, policy_batch(d).slice(begin, begin + 3), ctx, o).loss.item<double>();
  }
  EXPECT_NEAR(parts, r.loss.item<double>(), 1e-5);
}

TEST(GrpoPolicyLoss, OptionsComeFromTheActorSection) {
  ActorSection a;
  a.clip_ratio = 0.3;
  a.clip_ratio_high = 0.4;
  a.kl_loss_type = "mse";
  a.use_kl_loss = true;
  const PolicyLossOptions o = policy_loss_options(a);
  EXPECT_EQ(o.clip_low, 0.3);
  EXPECT_EQ(o.clip_high, 0.4);
  EXPECT_EQ(o.kl_type, KlType::kK2);
  EXPECT_TRUE(o.use_kl);
  ModelOutput out;
  out.log_probs = torch::zeros({1, 3});
  Batch b;
  b.set("loss_mask", torch::ones({1, 3}));
  b.set("old_log_probs", torch::zeros({1, 3}));
  b.set("advantages", torch::ones({1, 3}));
  PolicyLossOptions with_entropy;
  with_entropy.entropy_coeff = 0.1;
  LossContext ctx;
  ctx.global_num_tokens = 3;
  EXPECT_THROW(policy_loss(out, b, ctx, with_entropy), EngineryError);  // asked for entropy the model did not give
}

TEST(GrpoRolloutData, PromptsRewardsAndTheTrainingBatch) {
  const AdditionTask task(2, 1);
  Example e{task.tokens(47, 38), task.loss_mask(), {}};
  const Prompt p = prompt_of(e, "test");
  EXPECT_EQ(static_cast<int64_t>(p.ids.size()), task.answer_begin());
  EXPECT_EQ(static_cast<int64_t>(p.reference.size()), task.answer_len());
  EXPECT_EQ(p.reference.back(), AdditionTask::kEos);
  EXPECT_THROW(prompt_of(Example{{1, 2, 3}, {0, 0, 0}, {}}, "test"), EngineryError);

  Prompt shorter{{1, 5}, {6, AdditionTask::kEos}};
  const PromptBatch pb = repeat_prompts({p, shorter}, 2, AdditionTask::kPad);
  ASSERT_EQ(pb.ids.sizes().vec(), (std::vector<int64_t>{4, task.answer_begin()}));
  EXPECT_EQ(pb.mask[2].sum().item<int64_t>(), 2);  // left-padded: the real tokens end the row
  EXPECT_EQ(pb.ids[3][task.answer_begin() - 1].item<int64_t>(), 5);
  EXPECT_EQ(pb.mask[3][0].item<int64_t>(), 0);
  EXPECT_TRUE(pb.ids[0].equal(pb.ids[1]));

  // Rows 0, 1 answer p (row 0 right, row 1 stops early with a wrong digit); rows 2, 3 answer `shorter`.
  const int64_t P = task.answer_begin(), N = task.answer_len();
  models::GenerationResult gen;
  gen.sequences = torch::zeros({4, P + N}, torch::kLong);
  gen.sequences.slice(1, 0, P).copy_(pb.ids);
  gen.attention_mask = torch::zeros({4, P + N}, torch::kLong);
  gen.attention_mask.slice(1, 0, P).copy_(pb.mask);
  gen.response_mask = torch::zeros({4, N}, torch::kLong);
  gen.response_lengths = torch::tensor({N, int64_t{2}, int64_t{2}, int64_t{1}}, torch::kLong);
  const std::vector<std::vector<int64_t>> responses = {p.reference, {p.reference[0] + 1, AdditionTask::kEos},
                                                       {6, AdditionTask::kEos}, {AdditionTask::kEos}};
  for (int64_t row = 0; row < 4; ++row) {
    for (size_t t = 0; t < responses[row].size(); ++t) {
      gen.sequences[row][P + static_cast<int64_t>(t)] = responses[row][t];
      gen.attention_mask[row][P + static_cast<int64_t>(t)] = 1;
      gen.response_mask[row][static_cast<int64_t>(t)] = 1;
    }
  }
  // Row 1 has 0 of 4 tokens in place (its digit is wrong and <eos> comes too early); row 3 has 0 of 2.
  EXPECT_EQ(values_of(score_responses(gen, {p, shorter}, 2)), (std::vector<double>{1.0, 0.0, 1.0, 0.0}));
  const Batch batch = rollout_batch(gen);
  const torch::Tensor mask = batch.at("loss_mask");
  EXPECT_EQ(mask.sum().item<double>(), static_cast<double>(N + 2 + 2 + 1));
  EXPECT_EQ(mask.slice(1, 0, P).sum().item<double>(), 0.0);  // prompts are never targets
  EXPECT_EQ(mask[1][P + 1].item<double>(), 1.0);
  EXPECT_EQ(mask[1][P + 2].item<double>(), 0.0);
  EXPECT_TRUE(batch.at("input_ids").equal(gen.sequences));
  EXPECT_DOUBLE_EQ(answer_reward({1, 2}, {1, 2, 3}), 2.0 / 3.0);     // a right prefix, stop token missing
  EXPECT_DOUBLE_EQ(answer_reward({1, 9, 3}, {1, 2, 3}), 2.0 / 3.0);  // one wrong digit
  EXPECT_DOUBLE_EQ(answer_reward({1, 2, 3, 4}, {1, 2, 3}), 0.75);    // past the end
  EXPECT_EQ(answer_reward({1, 2, 3}, {1, 2, 3}), 1.0);
}

std::string write_config(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("enginery_grpo_config_" + std::to_string(getpid()));
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

const char* kGrpoConfig = R"(
[algorithm]
adv_estimator = "grpo"
norm_adv_by_std_in_grpo = false

[data]
train_batch_size = 8

[actor_rollout_ref.rollout]
n = 4
temperature = 0.7
response_length = 5

[actor_rollout_ref.actor]
ppo_mini_batch_size = 4
ppo_epochs = 2
clip_ratio_high = 0.28
use_kl_loss = true
kl_loss_type = "k2"

[rollout]
dtype = "fp32"
)";

TEST(GrpoConfig, ReadsVerlsSpellingAndTheShortOne) {
  const TrainConfig c = load_train_config(write_config("grpo.toml", kGrpoConfig));
  EXPECT_TRUE(c.is_grpo());
  EXPECT_FALSE(c.algorithm.norm_adv_by_std_in_grpo);
  EXPECT_EQ(c.rollout.n, 4);
  EXPECT_EQ(c.rollout.temperature, 0.7);
  EXPECT_EQ(c.rollout.response_length, 5);
  EXPECT_EQ(c.rollout.dtype, c10::kFloat);
  EXPECT_EQ(c.actor.ppo_mini_batch_size, 4);
  EXPECT_EQ(c.actor.clip_ratio_high.value(), 0.28);
  EXPECT_FALSE(c.actor.clip_ratio_low.has_value());
  EXPECT_EQ(c.actor.kl_loss_type, "k2");
  EXPECT_EQ(optimizer_steps_per_step(c), 4);  // 2 epochs x 2 mini-batches
  EXPECT_EQ(mini_batch_rows_per_rank(c, 2), 8);
  EXPECT_NE(c.where("actor.ppo_mini_batch_size").find("grpo.toml:15:"), std::string::npos)
      << c.where("actor.ppo_mini_batch_size");

  const TrainConfig set = load_train_config(write_config("grpo2.toml", kGrpoConfig),
                                            {"actor.ppo_epochs=3", "actor_rollout_ref.rollout.n=8"});
  EXPECT_EQ(set.actor.ppo_epochs, 3);  // the flag wins over the file's other spelling
  EXPECT_EQ(set.rollout.n, 8);

  // The resolved config (short spelling) reads back to the same config.
  const std::string text = to_toml(c);
  TrainConfig again = load_train_config(write_config("again.toml", text));
  again.source = c.source;
  EXPECT_EQ(to_toml(again), text);
}

TEST(GrpoConfig, BadKeysAndValuesAreRefusedByName) {
  const std::string base = kGrpoConfig;
  const std::string twice = error_of(write_config("twice.toml", base + "[actor]\nppo_epochs = 1\n"));
  EXPECT_NE(twice.find("actor.ppo_epochs is set twice, also as actor_rollout_ref.actor.ppo_epochs"),
            std::string::npos) << twice;

  const std::string unknown = error_of(write_config("unknown.toml", "[actor_rollout_ref.actor]\nclip_ratio_hi = 1\n"));
  EXPECT_NE(unknown.find("unknown.toml:2:1: unknown key 'actor_rollout_ref.actor.clip_ratio_hi'"), std::string::npos)
      << unknown;
  EXPECT_NE(unknown.find("clip_ratio_high"), std::string::npos) << unknown;
  const std::string table = error_of(write_config("table.toml", "[actor_rollout_ref.ref]\nx = 1\n"));
  EXPECT_NE(table.find("unknown table [actor_rollout_ref.ref]"), std::string::npos) << table;

  const auto path = write_config("values.toml", kGrpoConfig);
  EXPECT_NE(error_of(path, {"actor_rollout_ref.rollout.n=0"})
                .find("--set actor_rollout_ref.rollout.n=0: rollout.n must be positive"),
            std::string::npos)
      << error_of(path, {"actor_rollout_ref.rollout.n=0"});
  EXPECT_NE(error_of(path, {"actor.kl_loss_type=full"}).find("allowed: kl, k1, abs, mse, k2, low_var_kl, k3"),
            std::string::npos);
  EXPECT_NE(error_of(path, {"actor.ppo_mini_batch_size=3"}).find("do not split into mini-batches"),
            std::string::npos);
  EXPECT_NE(error_of(path, {"loss.type=ppo"}).find("loss.type = ppo is an offline objective"), std::string::npos);
  EXPECT_NE(error_of(path, {"data.train_files=x.jsonl"}).find("allowed: builtin:addition"), std::string::npos);
  EXPECT_NE(error_of(path, {"algorithm.adv_estimator=gae"}).find("allowed: none, grpo"), std::string::npos);
  EXPECT_NE(error_of(path, {"rollout.temperature=0"}).find("rollout.temperature = 0 cannot be sampled from"),
            std::string::npos);
  EXPECT_NE(error_of(path, {"actor.clip_ratio_c=1"}).find("actor.clip_ratio_c"), std::string::npos);
}

// The sampling values go through the check `enginery generate` makes (models/generation_settings.h), named by key
// and where they were set, when the config is read.
TEST(GrpoConfig, SamplingValuesThatCannotMakeADistributionAreRefusedByName) {
  const auto path = write_config("sampling.toml", kGrpoConfig);
  EXPECT_EQ(error_of(path, {"rollout.temperature=1e-300"}),
            "--set rollout.temperature=1e-300: rollout.temperature = 1e-300 cannot be sampled from (logits / "
            "temperature overflows, softmax gives NaN) (allowed: a finite number >= 0.01 (lower is the argmax: "
            "greedy decoding))");
  EXPECT_NE(error_of(path, {"rollout.temperature=0.001"}).find("rollout.temperature = 0.001 cannot be sampled"),
            std::string::npos);
  EXPECT_NE(error_of(path, {"rollout.temperature=inf"}).find("rollout.temperature = inf cannot be sampled from"),
            std::string::npos);
  EXPECT_EQ(error_of(path, {"actor_rollout_ref.rollout.top_p=0"}),
            "--set actor_rollout_ref.rollout.top_p=0: rollout.top_p = 0 keeps no token (allowed: (0, 1]; 1 = off)");
  EXPECT_EQ(error_of(path, {"rollout.top_k=-2"}),
            "--set rollout.top_k=-2: rollout.top_k = -2 is not a token count (allowed: -1 or 0 (off), or >= 1)");
  EXPECT_EQ(error_of(path, {"rollout.response_length=0"}),
            "--set rollout.response_length=0: rollout.response_length = 0 new tokens (allowed: >= 1)");
  for (const std::string ok : {"rollout.top_k=-1", "rollout.top_k=0", "rollout.top_k=5", "rollout.top_p=1e-300",
                               "rollout.temperature=0.01"}) {
    EXPECT_EQ(error_of(path, {ok}), "") << ok;
  }
  // The file's own position when the value is written there.
  std::string text = kGrpoConfig;
  text.replace(text.find("temperature = 0.7"), 17, "temperature = 0.0");
  const std::string in_file = error_of(write_config("cold.toml", text));
  EXPECT_NE(in_file.find("cold.toml:11:15: rollout.temperature = 0 cannot be sampled from"), std::string::npos)
      << in_file;
}

// The lengths and rollout.dtype against the model and device, before launch (preflight) and on each rank before
// the rollout copy is allocated: the same check as `enginery generate`'s prompts + --max-new-tokens.
TEST(GrpoRolloutSettings, ResponseLengthBeyondThePositionsIsRefusedBeforeAllocating) {
  const auto path = write_config("length.toml", kGrpoConfig);
  auto check = [&](const std::vector<std::string>& overrides) {
    const TrainConfig c = load_train_config(path, overrides);
    const TokenLimits limits = model_token_limits(c);  // builtin:qwen2-tiny: 2048 positions
    auto train = open_dataset(c.data.train_files, "train", c.data.max_length, c.data.digits, c.data.train_size,
                              1, limits);
    try {
      check_rollout_settings(c, *train, limits, c10::Device(c10::kCPU));
    } catch (const EngineryError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // 3-digit addition: the prompt "<bos> a + b =" is 9 tokens, leaving 2039.
  EXPECT_EQ(check({"rollout.response_length=2039"}), "no error");
  EXPECT_EQ(check({"rollout.response_length=2040"}),
            "--set rollout.response_length=2040: rollout.response_length = 2040 after a prompt of 9 tokens "
            "(builtin:addition (3 digits, 100000 training examples of 14 tokens)) exceeds max_position_embeddings = "
            "2048 of model.path = builtin:qwen2-tiny (allowed: 1..2039)");
  // Near INT64_MAX: compared without adding, so it cannot wrap around to a small length.
  EXPECT_NE(check({"rollout.response_length=9223372036854775807"})
                .find("rollout.response_length = 9223372036854775807 after a prompt of 9 tokens"),
            std::string::npos);
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(check({"rollout.dtype=fp32"}), "no error");
    try {
      models::check_dtype_on_device(c10::kBFloat16, c10::Device(c10::kCUDA, 0), "qwen2",
                                    {"rollout.dtype", "x.toml:3:9"});
      ADD_FAILURE() << "cuda accepted on a machine without it";
    } catch (const EngineryError& e) {
      EXPECT_EQ(std::string(e.what()), "x.toml:3:9: rollout.dtype = bf16 would run on cuda, and no CUDA device is "
                                       "available (allowed: the device set to cpu, or a machine with a CUDA GPU)");
    }
  }
}

TEST(GrpoStepPlan, SeedsDifferAcrossRanksAndStepsAndFollowTheDataSeed) {
  std::set<uint64_t> seen;
  for (int64_t rank = 0; rank < 4; ++rank) {
    for (int64_t step = 1; step <= 50; ++step) seen.insert(rollout_seed(1, rank, step));
  }
  EXPECT_EQ(seen.size(), 200u);
  EXPECT_EQ(rollout_seed(7, 1, 3), rollout_seed(7, 1, 3));
  EXPECT_NE(rollout_seed(7, 1, 3), rollout_seed(8, 1, 3));
  TrainConfig sft;
  EXPECT_EQ(optimizer_steps_per_step(sft), 1);
}

}  // namespace
}  // namespace grpo
}  // namespace enginery
