// ENGINERY_SDPA_BACKEND (support/torch_compat.h; docs/BENCHMARKS.md, "How the GPU comparison runs"): each named
// backend's causal grouped-query attention on the GPU, forward and backward, against float64 math on expanded k/v, in
// the layout models/layers.cpp hands over (q/k/v projected as [B, T, heads, D], viewed as [B, heads, T, D]). The
// switch's parsing needs no GPU. The kernels skip without CUDA or before LibTorch 2.6.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "host_api/error.h"
#include "support/torch_compat.h"

namespace enginery {
namespace {

using compat::SdpaBackend;

TEST(AttentionBackends, ParseNamesEveryBackendAndRefusesOthers) {
  EXPECT_EQ(compat::parse_sdpa_backend(nullptr), SdpaBackend::kAuto);
  EXPECT_EQ(compat::parse_sdpa_backend(""), SdpaBackend::kAuto);
  for (auto b : {SdpaBackend::kAuto, SdpaBackend::kFlash, SdpaBackend::kCudnn, SdpaBackend::kEfficient,
                 SdpaBackend::kMath}) {
    EXPECT_EQ(compat::parse_sdpa_backend(compat::sdpa_backend_name(b)), b);
  }
  try {
    compat::parse_sdpa_backend("fa3");
    FAIL() << "an unknown backend must be refused";
  } catch (const EngineryError& e) {
    EXPECT_EQ(e.where(), "ENGINERY_SDPA_BACKEND");
    EXPECT_NE(std::string(e.what()).find("'fa3'"), std::string::npos) << e.what();
    EXPECT_EQ(e.allowed(), "auto, flash, cudnn, efficient, math");
  }
}

// max |a - b| / max |b|, in float64.
double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.to(torch::kCPU, torch::kDouble), b64 = b.to(torch::kCPU, torch::kDouble);
  return ((a64 - b64).abs().max() / b64.abs().max().clamp_min(1e-30)).item<double>();
}

// Causal softmax(q k^T * scale) v in float64, query head h reading kv head h / (heads / kv_heads).
torch::Tensor float64_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
  const int64_t rep = q.size(1) / k.size(1), t = q.size(2);
  auto scores = torch::matmul(q, k.repeat_interleave(rep, 1).transpose(-2, -1)) * scale;
  auto future = torch::ones({t, t}, torch::kBool).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  return torch::matmul(scores.softmax(-1), v.repeat_interleave(rep, 1));
}

// `under_autocast`: as the model calls it in a bf16 run (models/layers.cpp), inside bf16 autocast.
void check_backend(SdpaBackend backend, bool under_autocast = false) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(5);
  const int64_t b = 2, t = 256, heads = 6, kv_heads = 2, d = 64;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto leaf = [&](int64_t h) { return torch::randn({b, t, h, d}, torch::kDouble).requires_grad_(true); };
  auto q64 = leaf(heads), k64 = leaf(kv_heads), v64 = leaf(kv_heads);
  auto grad_out = torch::randn({b, heads, t, d}, torch::kDouble);
  auto ref = float64_attention(q64.transpose(1, 2), k64.transpose(1, 2), v64.transpose(1, 2), scale);
  auto ref_grads = torch::autograd::grad({ref}, {q64, k64, v64}, {grad_out});

  auto on_gpu = [](const torch::Tensor& x) {
    return x.detach().to(torch::kCUDA, torch::kBFloat16).requires_grad_(true);
  };
  auto q = on_gpu(q64), k = on_gpu(k64), v = on_gpu(v64);
  std::optional<compat::AutocastScope> autocast;
  if (under_autocast) autocast.emplace(c10::DeviceType::CUDA, c10::kBFloat16);
  auto out = compat::sdpa_on_backend(backend, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                     /*is_causal=*/true, scale);
  autocast.reset();  // backward runs outside autocast, as the engine's does
  auto grads = torch::autograd::grad({out}, {q, k, v}, {grad_out.to(torch::kCUDA, out.scalar_type())});
  // bf16 inputs and outputs: a few units of bf16's 2^-8 relative step.
  const std::string name = std::string(compat::sdpa_backend_name(backend)) + (under_autocast ? " (autocast)" : "");
  EXPECT_LT(rel_diff(out, ref), 2e-2) << name << " output";
  const char* which[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < 3; ++i) EXPECT_LT(rel_diff(grads[i], ref_grads[i]), 3e-2) << name << " " << which[i];
}

TEST(AttentionBackendsGpu, FlashMatchesFloat64) { check_backend(SdpaBackend::kFlash); }
TEST(AttentionBackendsGpu, CudnnMatchesFloat64) { check_backend(SdpaBackend::kCudnn); }
TEST(AttentionBackendsGpu, EfficientMatchesFloat64) { check_backend(SdpaBackend::kEfficient); }
TEST(AttentionBackendsGpu, MathMatchesFloat64) { check_backend(SdpaBackend::kMath); }
// The math kernel's backward failed under bf16 autocast (a bf16 / fp32 mix inside its composition).
TEST(AttentionBackendsGpu, EachBackendTrainsUnderBf16Autocast) {
  for (auto b : {SdpaBackend::kFlash, SdpaBackend::kCudnn, SdpaBackend::kEfficient, SdpaBackend::kMath}) {
    check_backend(b, /*under_autocast=*/true);
  }
}

}  // namespace
}  // namespace enginery
