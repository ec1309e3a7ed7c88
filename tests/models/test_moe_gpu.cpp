// qwen3_moe's expert GEMMs on the GPU (models/moe.h): at::_grouped_mm in bf16 against the padded bmm path, alone
// and inside a sparse block: outputs and every gradient. Skips without CUDA.
#include <gtest/gtest.h>

#include <map>

#include "models/moe.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

double moe_rel_diff(const torch::Tensor& got, const torch::Tensor& want) {
  return testing::max_diff(got, want) / (want.abs().max().item<double>() + 1e-12);
}

TEST(MoeGpu, GroupedGemmMatchesPaddedInBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto bf16 = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  const int64_t experts = 8, k = 64, n = 128;
  ASSERT_TRUE(grouped_gemm_applies(torch::kCUDA, c10::kBFloat16, k, n));
  torch::manual_seed(1);
  const auto counts = torch::tensor({5, 0, 33, 1, 0, 12, 64, 7}, torch::kLong).cuda();
  const int64_t rows = counts.sum().item<int64_t>();
  const auto x0 = torch::randn({rows, k}, bf16);
  std::vector<torch::Tensor> w0;
  for (int64_t i = 0; i < experts * 2; ++i) w0.push_back(torch::randn({n / 2, k}, bf16) / 8.0);
  const auto gy = torch::randn({rows, n}, bf16);
  std::vector<torch::Tensor> y, gx, gw;
  for (ExpertGemm gemm : {ExpertGemm::kGrouped, ExpertGemm::kPadded}) {
    auto x = x0.clone().requires_grad_(true);
    std::vector<torch::Tensor> w;
    for (const auto& t : w0) w.push_back(t.clone().requires_grad_(true));
    auto out = expert_linear(x, counts, w, 2, gemm);
    (out * gy).sum().backward();
    y.push_back(out.detach());
    gx.push_back(x.grad());
    std::vector<torch::Tensor> g;
    for (const auto& t : w) g.push_back(t.grad());
    gw.push_back(torch::stack(g));
  }
  EXPECT_LE(moe_rel_diff(y[0], y[1]), 1e-2);
  EXPECT_LE(moe_rel_diff(gx[0], gx[1]), 1e-2);
  EXPECT_LE(moe_rel_diff(gw[0], gw[1]), 1e-2);
}

// The whole block in bf16 both ways: the router computes the same logits, so both route alike, and only the GEMMs
// differ.
TEST(MoeGpu, Bf16BlockGroupedMatchesPadded) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const auto args = builtin_args("qwen3-moe-tiny");
  torch::manual_seed(2);
  SparseMoeBlock block(args);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : block->parameters()) p.normal_(0.0, 0.2);
  }
  block->to(torch::kCUDA, torch::kBFloat16);
  const auto bf16 = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  const auto x0 = torch::randn({3, 40, args.hidden_size}, bf16), gy = torch::randn({3, 40, args.hidden_size}, bf16);
  std::vector<torch::Tensor> y, gx;
  std::vector<std::map<std::string, torch::Tensor>> grads;
  for (ExpertGemm gemm : {ExpertGemm::kGrouped, ExpertGemm::kPadded}) {
    block->zero_grad();
    auto x = x0.clone().requires_grad_(true);
    auto out = block->forward(x, gemm);
    (out * gy).sum().backward();
    y.push_back(out.detach());
    gx.push_back(x.grad());
    std::map<std::string, torch::Tensor> g;
    for (const auto& p : block->named_parameters()) g[p.key()] = p.value().grad().clone();
    grads.push_back(g);
  }
  EXPECT_LE(moe_rel_diff(y[0], y[1]), 1e-2);
  EXPECT_LE(moe_rel_diff(gx[0], gx[1]), 1e-2);
  for (const auto& [name, g] : grads[1]) EXPECT_LE(moe_rel_diff(grads[0].at(name), g), 1e-2) << name;
}

}  // namespace
}  // namespace models
}  // namespace enginery
