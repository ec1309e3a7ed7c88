// VeOmniEngine over 2 real Gloo ranks (tests/support/multirank.h): the non-zero rank never reads or receives the
// full weights, and training matches fsdp2 from the same init on 2 ranks and veomni on 1 rank.
#include <gtest/gtest.h>

#include <filesystem>

#include "models/model_factory.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/veomni/veomni_engine.h"
#include "tests/support/multirank.h"
#include "tests/veomni/veomni_test_util.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace {

namespace fs = std::filesystem;
using veomni_test::make_args;

constexpr int kSteps = 3;

// Rank `rank`'s half of the fixed global batch (4 rows).
Batch half(const Batch& global, int rank, int world) {
  const int64_t per = global.size() / world;
  return global.slice(rank * per, (rank + 1) * per);
}

std::map<std::string, torch::Tensor> train(BaseEngine& engine, const Batch& batch, std::vector<double>* norms) {
  engine.initialize();
  for (int step = 0; step < kSteps; ++step) {
    auto out = train_batch(engine, batch, veomni_test::sft_loss);
    if (norms) norms->push_back(out.grad_norm.item<double>());
  }
  return veomni_test::params_of(engine);
}

void run_world2(const std::string& param_dtype, double tolerance_vs_world1) {
  testing::run_ranks(2, [=](const testing::RankContext& ctx) {
    // Rank 0 writes a HF checkpoint; rank 1 gets a directory with its config.json only, so any attempt of rank 1
    // to load (or build) the full weights fails.
    const fs::path full = fs::path(ctx.shared_dir) / "full", config_only = fs::path(ctx.shared_dir) / "config_only";
    if (ctx.rank == 0) {
      ModelConfig cfg;
      cfg.path = "builtin:qwen2-tiny";
      auto model = models::build_model(cfg, "language_model");
      models::save_hf(*model, full.string());
      fs::create_directories(config_only);
      fs::copy_file(full / "config.json", config_only / "config.json");
    }
    ctx.group->barrier()->wait();
    const Batch global = veomni_test::make_batch(4, 16, 11);
    const Batch mine = half(global, ctx.rank, 2);

    auto vargs = make_args({}, param_dtype, ctx.rank, 2, ctx.group);
    vargs.model.path = (ctx.rank == 0 ? full : config_only).string();
    veomni::VeOmniEngine veomni(vargs);
    veomni.initialize();
    EXPECT_EQ(veomni.built_full_weights(), ctx.rank == 0);
    // Sharded at rest on every rank: no parameter holds storage; each rank's masters are about half the model.
    int64_t full_numel = 0, shard_numel = 0;
    for (auto& u : veomni.fsdp_module()->units()) {
      shard_numel += u.shard().numel();
      for (const auto& p : u.params()) {
        full_numel += p.numel();
        EXPECT_EQ(p.storage().nbytes(), 0u) << u.name();
      }
    }
    EXPECT_LE(shard_numel, full_numel / 2 + 4096);
    // What rank 1 got by scatter is exactly the checkpoint's weights.
    auto loaded = veomni_test::params_of(veomni);
    std::map<std::string, torch::Tensor> reference;
    {
      ModelConfig cfg;
      cfg.path = full.string();
      auto model = models::build_model(cfg, "language_model");
      for (const auto& item : model->named_parameters()) reference[item.key()] = item.value().detach().clone();
    }
    EXPECT_EQ(veomni_test::max_diff(loaded, reference), 0.0);

    std::vector<double> veomni_norms;
    for (int step = 0; step < kSteps; ++step) {
      veomni_norms.push_back(train_batch(veomni, mine, veomni_test::sft_loss).grad_norm.item<double>());
    }
    auto veomni_params = veomni_test::params_of(veomni);

    // fsdp2 from the same init (every rank loads the full checkpoint): the same sharded math.
    auto fargs = vargs;
    fargs.engine.strategy = "fsdp2";
    fargs.engine.backend_options.clear();
    fargs.model.path = full.string();
    fsdp::FSDPEngine fsdp2(fargs);
    std::vector<double> fsdp2_norms;
    auto fsdp2_params = train(fsdp2, mine, &fsdp2_norms);
    EXPECT_LE(veomni_test::max_diff(veomni_params, fsdp2_params), 1e-6);
    for (int step = 0; step < kSteps; ++step) EXPECT_NEAR(veomni_norms[step], fsdp2_norms[step], 1e-6);

    // veomni on one rank with the whole batch (rank 0 only; the group is not used).
    if (ctx.rank == 0) {
      auto args1 = make_args({}, param_dtype);
      args1.model.path = full.string();
      veomni::VeOmniEngine one(args1);
      std::vector<double> one_norms;
      auto one_params = train(one, global, &one_norms);
      using veomni_test::Params;
      EXPECT_LE(veomni_test::max_diff(veomni_params, one_params, Params::kAllButKeyBias), tolerance_vs_world1);
      // A tenth of one step's lr (1e-2): noise-driven moves stay far below it (5e-5 seen with torch 2.11).
      EXPECT_LE(veomni_test::max_diff(veomni_params, one_params, Params::kKeyBiasOnly), 1e-3);
      for (int step = 0; step < kSteps; ++step) {
        EXPECT_NEAR(veomni_norms[step], one_norms[step], tolerance_vs_world1 + 1e-4 * one_norms[step]);
      }
    }
  });
}

TEST(VeOmniMultiRank, Fp32World2MatchesFsdp2AndWorld1AndRank1NeverLoadsWeights) { run_world2("fp32", 2e-5); }

// bf16 is covered on one rank (veomni_settings_test); over 2 Gloo ranks only fp32 is compared here.

}  // namespace
}  // namespace enginery
