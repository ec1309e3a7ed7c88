// GPU tests (label gpu; they skip without CUDA or NCCL): the dtype regression with real fp16 and bf16 autocast on
// CUDA over NCCL (world size 1), and a 50-step fp16 run whose loss tracks the bf16 run's.
#include <gtest/gtest.h>

#include <filesystem>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "engine_driver/precision.h"
#include "kernels/fused_cuda.h"
#include "models/fp8_linear.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "engine_driver/step_loop.h"

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
    auto out = train_batch(engine, make_batch(4, 16, 64, 5), sft_loss);
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
      losses.push_back(train_batch(engine, make_batch(8, 16, 64, step % 5), sft_loss).loss.item<double>());
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

bool have_fp8() {
  return have_gpu() && compat::fp8_gemm_device(torch::Device(torch::kCUDA, 0));
}

double relative_error(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got.to(torch::kDouble) - want).norm() / want.norm()).item<double>();
}

// Tensor-wise quantization: the largest magnitude lands just inside the format, nothing overflows, and every value
// of normal size comes back within the format's rounding (e4m3: 3 mantissa bits, e5m2: 2).
TEST(GpuFp8, QuantizationUsesTheRangeAndRoundsWithinTheFormat) {
  if (!have_fp8()) GTEST_SKIP() << "no FP8 GEMMs here (LibTorch 2.5+ and sm89+)";
  torch::manual_seed(0);
  const auto x = (torch::randn({256, 512}, torch::kCUDA) * 3).to(torch::kBFloat16);
  for (const auto& [type, largest, rounding] : {std::tuple{compat::float8_e4m3(), 448.0, 1.0 / 16},
                                                std::tuple{compat::float8_e5m2(), 57344.0, 1.0 / 8}}) {
    const auto q = models::quantize_tensorwise(x, type);
    const auto data = q.data.to(torch::kFloat);
    ASSERT_TRUE(torch::isfinite(data).all().item<bool>());
    const double top = data.abs().max().item<double>();
    EXPECT_LE(top, largest);
    EXPECT_GE(top, largest * 0.85) << "the scale leaves most of the range unused";
    const auto back = data * q.inv_scale, xf = x.to(torch::kFloat);
    const auto normal = xf.abs() > xf.abs().max() / 64;
    const double worst = ((back - xf).abs() / xf.abs()).masked_select(normal).max().item<double>();
    EXPECT_LE(worst, rounding * 1.01) << "relative rounding beyond the format's";
    // Both layouts from one pass (enginery's kernel on a contiguous matrix: the 8-wide path here, the one-wide
    // path for a shape that is not a multiple of 8) hold the same bytes, and agree with the ATen composition
    // (taken for a non-contiguous input) to within one step of the format (that path rounds to bf16 first).
    for (const auto& m : {x, x.slice(0, 0, 20).slice(1, 0, 36).contiguous()}) {
      const auto both = models::quantize_tensorwise(m, type, true, true);
      EXPECT_TRUE(torch::equal(both.data_t.to(torch::kFloat), both.data.to(torch::kFloat).t())) << m.sizes();
      const auto aten = models::quantize_tensorwise(m.t(), type, true, false);
      const auto fused = both.data_t.to(torch::kFloat);
      const auto step = (aten.data.to(torch::kFloat) - fused).abs() / fused.abs().clamp_min(1e-30);
      const auto big = m.t().to(torch::kFloat).abs() > m.to(torch::kFloat).abs().max() / 64;
      EXPECT_LE(step.masked_select(big).max().item<double>(), 2 * rounding * 1.01) << m.sizes();
    }
  }
}

// fp8 = "delayed": the cast kernel records max |x| in its own pass (raising, never lowering, what is there), and a
// history's scale is the largest amax it recorded: a smaller tensor then uses part of the range, a larger one
// saturates at the format's largest value instead of overflowing.
TEST(GpuFp8, DelayedScalingRecordsTheAmaxInTheCastAndScalesFromTheHistory) {
  if (!have_fp8()) GTEST_SKIP() << "no FP8 GEMMs here (LibTorch 2.5+ and sm89+)";
  torch::manual_seed(2);
  const auto x = (torch::randn({256, 512}, torch::kCUDA) * 3).to(torch::kBFloat16);
  const auto odd = x.slice(0, 0, 20).slice(1, 0, 36).contiguous();  // the one-wide kernel
  const auto scale = torch::ones({1}, torch::dtype(torch::kFloat).device(torch::kCUDA));
  for (const auto& m : {x, odd}) {
    auto amax = torch::zeros({1}, scale.options());
    kernels::fp8_scale_cast(m, scale, compat::float8_e4m3(), true, true, amax);
    EXPECT_EQ(amax.item<float>(), m.abs().max().to(torch::kFloat).item<float>()) << m.sizes();
    auto higher = torch::full({1}, 1e6, scale.options());
    kernels::fp8_scale_cast(m, scale, compat::float8_e4m3(), true, false, higher);
    EXPECT_EQ(higher.item<float>(), 1e6f) << "an amax was lowered";
  }
  models::Fp8AmaxHistory history;
  const double largest = 448.0;
  auto top = [](const models::Fp8Tensor& q) { return q.data.to(torch::kFloat).abs().max().item<double>(); };
  const auto first = models::quantize_tensorwise(x, compat::float8_e4m3(), true, false, &history);
  ASSERT_TRUE(history.amax.defined());
  EXPECT_EQ(history.next, 1);
  EXPECT_EQ(history.amax[0].item<float>(), x.abs().max().to(torch::kFloat).item<float>());
  EXPECT_GE(top(first), largest * 0.95) << "the first cast measures its own amax";
  const auto half = models::quantize_tensorwise((x * 0.5).contiguous(), compat::float8_e4m3(), true, false, &history);
  EXPECT_NEAR(top(half), largest * (1 - 1.0 / 128) / 2, largest / 32) << "scaled from the history, not measured";
  EXPECT_EQ(history.amax[1].item<float>(), (x * 0.5).abs().max().to(torch::kFloat).item<float>());
  const auto big = models::quantize_tensorwise((x * 4).contiguous(), compat::float8_e4m3(), true, false, &history);
  EXPECT_EQ(top(big), largest) << "values above the history's amax saturate";
  ASSERT_TRUE(torch::isfinite(big.data.to(torch::kFloat)).all().item<bool>());
  EXPECT_EQ(history.next, 3);
  const auto after = models::quantize_tensorwise(x, compat::float8_e4m3(), true, false, &history);
  EXPECT_NEAR(top(after), largest * (1 - 1.0 / 128) / 4, largest / 32) << "the 4x amax is in the history now";
}

// One input shared by two linears (one with a bias), forward and backward, against float64 math: the outputs and
// both gradients stay within FP8's error (a few percent of their norm), and the path taken is the FP8 one.
TEST(GpuFp8, LinearsMatchFloat64WithinFp8Error) {
  if (!have_fp8()) GTEST_SKIP() << "no FP8 GEMMs here (LibTorch 2.5+ and sm89+)";
  torch::manual_seed(1);
  torch::nn::Linear wide(torch::nn::LinearOptions(256, 512).bias(true));
  torch::nn::Linear narrow(torch::nn::LinearOptions(256, 128).bias(false));
  wide->to(torch::kCUDA, torch::kBFloat16);
  narrow->to(torch::kCUDA, torch::kBFloat16);
  const auto x = torch::randn({4, 64, 256}, torch::kCUDA).to(torch::kBFloat16).requires_grad_(true);
  const auto g0 = torch::randn({4, 64, 512}, torch::kCUDA).to(torch::kBFloat16);
  const auto g1 = torch::randn({4, 64, 128}, torch::kCUDA).to(torch::kBFloat16) * 1e-3;  // a small gradient's scale
  ASSERT_TRUE(models::fp8_linears_apply(x, {wide, narrow}));
  const auto ys = models::fp8_linears(x, {wide, narrow});
  EXPECT_EQ(ys[0].scalar_type(), torch::kBFloat16);
  torch::autograd::backward({ys[0], ys[1]}, {g0, g1});

  auto d = [](const torch::Tensor& t) { return t.detach().to(torch::kDouble); };
  const auto x64 = d(x), w0 = d(wide->weight), w1 = d(narrow->weight);
  const auto y0 = torch::matmul(x64, w0.t()) + d(wide->bias), y1 = torch::matmul(x64, w1.t());
  const auto dx = torch::matmul(d(g0), w0) + torch::matmul(d(g1), w1);
  const auto dw0 = torch::matmul(d(g0).reshape({-1, 512}).t(), x64.reshape({-1, 256}));
  const auto dw1 = torch::matmul(d(g1).reshape({-1, 128}).t(), x64.reshape({-1, 256}));
  EXPECT_LT(relative_error(ys[0], y0), 0.06);
  EXPECT_LT(relative_error(ys[1], y1), 0.06);
  EXPECT_LT(relative_error(x.grad(), dx), 0.08);
  EXPECT_LT(relative_error(wide->weight.grad(), dw0), 0.10);
  EXPECT_LT(relative_error(narrow->weight.grad(), dw1), 0.10);
  const auto bias_grad = d(g0).sum(std::vector<int64_t>{0, 1});
  EXPECT_LT(relative_error(wide->bias.grad(), bias_grad), 0.01);  // the bias is outside the FP8 GEMM
  // FP8, not a bf16 fallback: bf16 would be ten times closer.
  EXPECT_GT(relative_error(ys[0], y0), 0.004);
}

// [engine.fsdp2] fp8 = "tensorwise" and "delayed" on a real decoder (builtin:qwen2-tiny, every dimension a multiple
// of 16): the loss follows the bf16 engine's over 30 steps within FP8's noise, learns as much, and differs from it
// (the FP8 GEMMs ran).
class GpuFp8Recipe : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuFp8Recipe, EngineLossTracksBf16) {
  if (!have_fp8()) GTEST_SKIP() << "no FP8 GEMMs here (LibTorch 2.5+ and sm89+)";
  const std::string recipe = GetParam();
  auto run = [&](bool fp8) {
    auto args = cuda_args("fsdp2", "bf16");
    args.model.path = "builtin:qwen2-tiny";
    args.optim.lr = 3e-3;
    args.optim.clip_grad = 1.0;
    if (fp8) args.engine.backend_options["fp8"] = std::string(recipe);
    fsdp::FSDPEngine engine(args);
    engine.initialize();
    std::vector<double> losses;
    for (int step = 0; step < 30; ++step) {
      losses.push_back(train_batch(engine, make_batch(4, 64, 64, step % 5), sft_loss).loss.item<double>());
    }
    return losses;
  };
  const auto bf16 = run(false), fp8 = run(true);
  EXPECT_NE(fp8, bf16) << "fp8 = " << recipe << " computed exactly what bf16 did";
  EXPECT_LT(fp8.back(), fp8.front() * 0.8) << "fp8 did not learn";
  for (size_t i = 0; i < fp8.size(); ++i) EXPECT_NEAR(fp8[i], bf16[i], 0.03 * bf16[i]) << "step " << i;
  std::cout << recipe << " fp8 vs bf16 loss: step 0 " << fp8.front() << " / " << bf16.front() << ", step 29 "
            << fp8.back() << " / " << bf16.back() << "\n";
}

INSTANTIATE_TEST_SUITE_P(Recipes, GpuFp8Recipe, ::testing::Values("tensorwise", "delayed"));

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
