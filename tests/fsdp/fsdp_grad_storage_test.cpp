// Where the shard gradient lives: released at zero_grad (FSDP2's set_to_none) until the first reduction writes it;
// at one rank with bf16 parameters it is kept in bf16, which must be exact — a run with it trains bitwise like a
// run that stores fp32 — and a second reduction onto it (gradients accumulated over two calls) must go to fp32.
// With two ranks the reduction sums across ranks, so the gradient is fp32.
#include <gtest/gtest.h>

#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

std::unique_ptr<fsdp::FSDPEngine> make_engine(const std::string& strategy, bool keep_exact_bf16) {
  auto args = make_args(strategy, "bf16");
  auto engine = std::make_unique<fsdp::FSDPEngine>(args, tiny_builder(TinyConfig{}));
  engine->initialize();
  for (auto& u : engine->fsdp_module()->units()) u.set_keep_exact_bf16_grads(keep_exact_bf16);
  return engine;
}

std::vector<c10::ScalarType> grad_dtypes(fsdp::FSDPEngine& engine) {
  std::vector<c10::ScalarType> out;
  for (auto& u : engine.fsdp_module()->units()) out.push_back(u.shard_grad().scalar_type());
  return out;
}

void expect_bitwise_equal(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << what << ": " << name;
}

class GradStorageTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GradStorageTest, ZeroGradReleasesTheShardGradient) {
  auto engine = make_engine(GetParam(), true);
  train_batch(*engine, make_batch(4, 8, 64, 80), sft_loss);
  engine->optimizer_zero_grad();
  for (auto& u : engine->fsdp_module()->units()) EXPECT_FALSE(u.holds_shard_grad()) << u.name();
  // Read before any reduction: zeros of the shard's size.
  auto& u = engine->fsdp_module()->units().front();
  EXPECT_EQ(u.shard_grad().numel(), u.layout().shard_numel());
  EXPECT_EQ(u.shard_grad().abs().sum().item<double>(), 0.0);
}

TEST_P(GradStorageTest, ExactBf16GradientsTrainBitwiseLikeFp32Ones) {
  auto kept = make_engine(GetParam(), true), fp32 = make_engine(GetParam(), false);
  for (int step = 0; step < 3; ++step) {
    // Two micro-batches: the full gradients accumulate in bf16 (no sync) and are reduced once.
    Batch batch = make_batch(4, 8, 64, 81 + step);
    for (auto* e : {kept.get(), fp32.get()}) {
      e->optimizer_zero_grad();
      forward_backward_batch(*e, batch, sft_loss, false);
    }
    for (auto dt : grad_dtypes(*kept)) EXPECT_EQ(dt, torch::kBFloat16);
    for (auto dt : grad_dtypes(*fp32)) EXPECT_EQ(dt, torch::kFloat);
    auto& units_kept = kept->fsdp_module()->units();
    auto& units_fp32 = fp32->fsdp_module()->units();
    for (size_t i = 0; i < units_kept.size(); ++i) {
      EXPECT_TRUE(torch::equal(units_kept[i].shard_grad().to(torch::kFloat), units_fp32[i].shard_grad()))
          << "step " << step << ", unit " << units_kept[i].name();
    }
    auto norm_kept = kept->optimizer_step(), norm_fp32 = fp32->optimizer_step();
    EXPECT_EQ(norm_kept.item<double>(), norm_fp32.item<double>()) << "step " << step;
    kept->lr_scheduler_step();
    fp32->lr_scheduler_step();
  }
  expect_bitwise_equal(engine_params(*kept), engine_params(*fp32), "after 3 steps");
}

TEST_P(GradStorageTest, ASecondReductionSumsInFp32) {
  auto kept = make_engine(GetParam(), true), fp32 = make_engine(GetParam(), false);
  Batch first = make_batch(4, 8, 64, 90), second = make_batch(4, 8, 64, 91);
  for (auto* e : {kept.get(), fp32.get()}) {
    e->optimizer_zero_grad();
    forward_backward_batch(*e, first, sft_loss, false);
    forward_backward_batch(*e, second, sft_loss, false);
  }
  for (auto dt : grad_dtypes(*kept)) EXPECT_EQ(dt, torch::kFloat) << "a sum of two bf16 gradients is not bf16";
  auto& units_kept = kept->fsdp_module()->units();
  auto& units_fp32 = fp32->fsdp_module()->units();
  for (size_t i = 0; i < units_kept.size(); ++i) {
    EXPECT_TRUE(torch::equal(units_kept[i].shard_grad(), units_fp32[i].shard_grad())) << units_kept[i].name();
  }
  kept->optimizer_step();
  fp32->optimizer_step();
  expect_bitwise_equal(engine_params(*kept), engine_params(*fp32), "two calls, one step");
}

INSTANTIATE_TEST_SUITE_P(Strategies, GradStorageTest, ::testing::Values("fsdp", "fsdp2"));

TEST(GradStorage, TwoRanksReduceIntoFp32) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "bf16", ctx.rank, 2, ctx.group, ctx.store);
    fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    engine.initialize();
    engine.optimizer_zero_grad();
    forward_backward_batch(engine, rank_slice(make_batch(4, 8, 64, 95), ctx.rank, 2), sft_loss, false);
    for (auto dt : grad_dtypes(engine)) EXPECT_EQ(dt, torch::kFloat);
  });
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
