// GPU tests (label gpu; they skip without CUDA or NCCL): the dtype regression with real fp16 and bf16 autocast on
// CUDA over NCCL (world size 1), and a 50-step fp16 run whose loss tracks the bf16 run's.
#include <gtest/gtest.h>

#include <filesystem>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "host_api/precision.h"
#include "tests/fsdp/fsdp_test_util.h"

namespace enginery {
namespace fsdp_test {
namespace {

bool have_gpu() { return torch::cuda::is_available() && compat::has_nccl(); }

EngineArgs cuda_args(const std::string& strategy, const std::string& dtype) {
  static int counter = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("enginery_gpu_store_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove(path);
  auto store = c10::make_intrusive<c10d::FileStore>(path.string(), 1);
  auto args = make_args(strategy, dtype, 0, 1, compat::make_nccl_group(store, 0, 1), store);
  args.device = "cuda";
  args.local_rank = 0;
  return args;
}

class GpuPrecisionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuPrecisionTest, AutocastDtypeScalerAndComputeDtype) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  for (const std::string dtype : {"bf16", "fp16", "fp32"}) {
    SCOPED_TRACE(GetParam() + " " + dtype);
    std::shared_ptr<TinyDecoder> model;
    fsdp::FSDPEngine engine(cuda_args(GetParam(), dtype), tiny_builder(TinyConfig{}, &model));
    engine.initialize();
    const auto expected = PrecisionType::to_dtype(dtype);
    EXPECT_EQ(engine.autocast_dtype(), expected);
    EXPECT_EQ(engine.grad_scaler() != nullptr, expected == c10::kHalf);
    std::vector<c10::ScalarType> seen;
    model->probe = [&](size_t unit, const torch::Tensor& t) {
      if (unit > 0) seen.push_back(t.scalar_type());
    };
    auto out = engine.train_batch(make_batch(4, 16, 64, 5), sft_loss);
    ASSERT_FALSE(seen.empty());
    for (auto s : seen) EXPECT_EQ(s, expected);
    EXPECT_TRUE(std::isfinite(out.grad_norm.item<double>()));
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, GpuPrecisionTest, ::testing::Values("fsdp", "fsdp2"));

TEST(GpuFp16, FiftyStepLossTracksBf16) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  auto run = [](const std::string& dtype) {
    auto args = cuda_args("fsdp2", dtype);
    args.optim.lr = 3e-3;
    args.optim.clip_grad = 1.0;
    TinyConfig cfg;
    cfg.hidden = 32;
    fsdp::FSDPEngine engine(args, tiny_builder(cfg));
    engine.initialize();
    std::vector<double> losses;
    for (int step = 0; step < 50; ++step) {
      losses.push_back(engine.train_batch(make_batch(8, 16, 64, step % 5), sft_loss).loss.item<double>());
    }
    return losses;
  };
  const auto bf16 = run("bf16"), fp16 = run("fp16");
  auto tail_mean = [](const std::vector<double>& v) {
    double s = 0;
    for (size_t i = v.size() - 10; i < v.size(); ++i) s += v[i];
    return s / 10;
  };
  EXPECT_LT(tail_mean(bf16), bf16.front() * 0.9) << "bf16 did not learn";
  EXPECT_LT(tail_mean(fp16), fp16.front() * 0.9) << "fp16 did not learn";
  EXPECT_NEAR(tail_mean(fp16), tail_mean(bf16), 0.05 * tail_mean(bf16));
  for (size_t i = 0; i < fp16.size(); ++i) EXPECT_NEAR(fp16[i], bf16[i], 0.1 * bf16[i]) << "step " << i;
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
