// enginery's CUDA kernels (kernels/) against independent references on the GPU: the head's fused log-softmax path
// against ATen's full-logits computation on the same bf16 logits, and SwiGLU, SwiGLU + down projection, RoPE and
// the fp32 accumulation and AdamW (fp32 or bf16 gradients) against float64 math. Both the 16-byte path and the element-wise tail are exercised
// (sizes that are and are not multiples of 8). Skips where there is no CUDA device or no kernels in the build.
#include <gtest/gtest.h>

#include "kernels/fused_cuda.h"
#include "models/fused_ops.h"
#include "models/layers.h"
#include "models/lm_head.h"

namespace enginery {
namespace models {
namespace {

bool have_kernels() { return torch::cuda::is_available() && kernels::compiled(); }

#define REQUIRE_KERNELS() \
  if (!have_kernels()) GTEST_SKIP() << "no CUDA device or no CUDA kernels in this build"

// max |a - b| / max |b|, in float64.
double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  auto a64 = a.to(torch::kCPU, torch::kDouble), b64 = b.to(torch::kCPU, torch::kDouble);
  return ((a64 - b64).abs().max() / b64.abs().max().clamp_min(1e-30)).item<double>();
}

torch::Tensor cuda_randn(at::IntArrayRef shape, torch::Dtype dtype, double scale = 1.0) {
  return (torch::randn(shape, torch::kDouble) * scale).to(torch::kCUDA, dtype);
}

// Log-probs and entropy in float64 from bf16 logits made by the same per-chunk matmuls as the fused head (cuBLAS
// may round a differently shaped product differently, so the full-logits path is no bitwise reference for them).
TokenLogProbs float64_from_chunk_logits(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& targets,
                                        int64_t chunk) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (int64_t s = 0; s < h.size(0); s += chunk) {
    parts.push_back(torch::mm(h.narrow(0, s, std::min(chunk, h.size(0) - s)), w.t()));
  }
  auto logp = torch::cat(parts).to(torch::kDouble).log_softmax(-1);
  return {logp.gather(1, targets.unsqueeze(1)).squeeze(1), -(logp.exp() * logp).sum(-1)};
}

void check_head(int64_t n, int64_t hidden, int64_t vocab, int64_t chunk) {
  torch::manual_seed(11);
  auto h = cuda_randn({n, hidden}, torch::kBFloat16).requires_grad_(true);
  auto w = cuda_randn({vocab, hidden}, torch::kBFloat16, 0.5).requires_grad_(true);
  auto targets = torch::randint(0, vocab, {n}, torch::kLong).to(torch::kCUDA);
  auto w_lp = torch::randn({n}).to(torch::kCUDA), w_ent = torch::randn({n}).to(torch::kCUDA);
  auto loss_of = [&](const TokenLogProbs& r) { return (r.log_probs * w_lp).sum() + (r.entropy * w_ent).sum(); };

  auto ref = full_log_probs(h, w, targets, true, torch::kBFloat16);
  auto ref_grads = torch::autograd::grad({loss_of(ref)}, {h, w});
  auto fused = chunked_log_probs(h, w, targets, true, torch::kBFloat16, chunk);
  auto grads = torch::autograd::grad({loss_of(fused)}, {h, w});

  // Same bf16 logits: log-probs and entropy agree to fp32 arithmetic. Against the full-logits path they differ by
  // the rounding of a few logits only.
  auto exact = float64_from_chunk_logits(h, w, targets, chunk);
  EXPECT_LT((fused.log_probs - exact.log_probs).abs().max().item<double>(), 1e-4);
  EXPECT_LT((fused.entropy - exact.entropy).abs().max().item<double>(), 1e-4);
  EXPECT_LT((fused.log_probs - ref.log_probs).abs().max().item<double>(), 2e-2);
  // Gradients pass through bf16 logit gradients on both sides (rounded at different points).
  EXPECT_LT(rel_diff(grads[0], ref_grads[0]), 2e-2);
  EXPECT_LT(rel_diff(grads[1], ref_grads[1]), 2e-2);
  EXPECT_EQ(grads[1].scalar_type(), torch::kBFloat16);

  // Log-probs alone (no entropy requested): the same values, and the gradient of the log-probs term alone.
  auto only = chunked_log_probs(h, w, targets, false, torch::kBFloat16, chunk);
  EXPECT_LT((only.log_probs - exact.log_probs).abs().max().item<double>(), 1e-4);
  auto g_only = torch::autograd::grad({(only.log_probs * w_lp).sum()}, {h, w});
  auto ref_only = full_log_probs(h, w, targets, false, torch::kBFloat16);
  auto g_ref = torch::autograd::grad({(ref_only.log_probs * w_lp).sum()}, {h, w});
  EXPECT_LT(rel_diff(g_only[0], g_ref[0]), 2e-2);
  EXPECT_LT(rel_diff(g_only[1], g_ref[1]), 2e-2);
}

TEST(FusedKernelsGpu, HeadMatchesFullLogitsPackedVocab) {
  REQUIRE_KERNELS();
  check_head(300, 64, 1000, 128);
}

TEST(FusedKernelsGpu, HeadMatchesFullLogitsOddVocab) {
  REQUIRE_KERNELS();
  check_head(77, 48, 1003, 20);
}

void check_swiglu_down(at::IntArrayRef shape, int64_t out_features) {
  torch::manual_seed(5);
  auto gate = cuda_randn(shape, torch::kBFloat16, 2.0).requires_grad_(true);
  auto up = cuda_randn(shape, torch::kBFloat16).requires_grad_(true);
  auto w = cuda_randn({out_features, shape.back()}, torch::kBFloat16, 0.3).requires_grad_(true);
  ASSERT_TRUE(fused_swiglu_down_applies(gate, up));
  auto y = swiglu_down(gate, up, w);
  auto gy = cuda_randn(y.sizes(), torch::kBFloat16);
  auto g = torch::autograd::grad({y}, {gate, up, w}, {gy});

  auto g64 = gate.detach().to(torch::kDouble).requires_grad_(true);
  auto u64 = up.detach().to(torch::kDouble).requires_grad_(true);
  auto w64 = w.detach().to(torch::kDouble).requires_grad_(true);
  auto y64 = torch::linear(torch::silu(g64) * u64, w64);
  auto r = torch::autograd::grad({y64}, {g64, u64, w64}, {gy.to(torch::kDouble)});
  EXPECT_LT(rel_diff(y, y64), 1e-2);
  for (int i = 0; i < 3; ++i) EXPECT_LT(rel_diff(g[i], r[i]), 2e-2) << "gradient " << i;

  // The plain SwiGLU function on the same kernels.
  auto s = swiglu(gate, up);
  auto gs = cuda_randn(s.sizes(), torch::kBFloat16);
  auto sg = torch::autograd::grad({s}, {gate, up}, {gs});
  auto s64 = torch::silu(g64) * u64;
  auto sr = torch::autograd::grad({s64}, {g64, u64}, {gs.to(torch::kDouble)});
  EXPECT_LT(rel_diff(s, s64), 1e-2);
  EXPECT_LT(rel_diff(sg[0], sr[0]), 1e-2);
  EXPECT_LT(rel_diff(sg[1], sr[1]), 1e-2);
}

TEST(FusedKernelsGpu, SwigluDownMatchesFloat64Packed) {
  REQUIRE_KERNELS();
  check_swiglu_down({4, 33, 40}, 24);
}

TEST(FusedKernelsGpu, SwigluDownMatchesFloat64OddSizes) {
  REQUIRE_KERNELS();
  check_swiglu_down({3, 7, 13}, 5);
}

TEST(FusedKernelsGpu, RopeMatchesFloat64ForBothTableDtypes) {
  REQUIRE_KERNELS();
  torch::manual_seed(3);
  const int64_t b = 2, t = 9, heads = 3, d = 16;
  auto positions = torch::arange(t, torch::kLong).repeat({b, 1}).add_(torch::tensor({{0}, {5}}));
  auto inv = 1.0 / torch::pow(10000.0, torch::arange(0, d, 2).to(torch::kDouble) / double(d));
  auto freqs = positions.to(torch::kDouble).unsqueeze(-1) * inv.view({1, 1, -1});
  auto emb = torch::cat({freqs, freqs}, -1);
  auto cos64 = emb.cos(), sin64 = emb.sin();
  for (auto table_dtype : {torch::kFloat, torch::kBFloat16}) {
    auto x = cuda_randn({b, t, heads, d}, torch::kBFloat16).requires_grad_(true);
    auto cos = cos64.to(torch::kCUDA, table_dtype), sin = sin64.to(torch::kCUDA, table_dtype);
    ASSERT_TRUE(fused_rope_applies(x));
    auto y = rope(x, cos, sin);
    auto gy = cuda_randn(y.sizes(), torch::kBFloat16);
    auto gx = torch::autograd::grad({y}, {x}, {gy})[0];

    auto x64 = x.detach().to(torch::kCPU, torch::kDouble).requires_grad_(true);
    auto c = cos.to(torch::kCPU, torch::kDouble).unsqueeze(2), s = sin.to(torch::kCPU, torch::kDouble).unsqueeze(2);
    auto rotated = torch::cat({-x64.narrow(-1, d / 2, d / 2), x64.narrow(-1, 0, d / 2)}, -1);
    auto y64 = x64 * c + rotated * s;
    auto gx64 = torch::autograd::grad({y64}, {x64}, {gy.to(torch::kCPU, torch::kDouble)})[0];
    EXPECT_EQ(y.sizes(), x.sizes());
    EXPECT_LT(rel_diff(y, y64), 1e-2) << table_dtype;
    EXPECT_LT(rel_diff(gx, gx64), 1e-2) << table_dtype;
  }
}

TEST(FusedKernelsGpu, AccumulateAddsOrWritesExactlyWhatFp32WouldHold) {
  REQUIRE_KERNELS();
  torch::manual_seed(9);
  for (int64_t n : {4096, 1001}) {
    for (auto dtype : {torch::kBFloat16, torch::kHalf, torch::kFloat}) {
      auto dst = torch::randn({n}).to(torch::kCUDA);
      auto src = cuda_randn({n}, dtype);
      auto expected = dst + src.to(torch::kFloat);
      kernels::accumulate_(dst, src);
      EXPECT_TRUE(torch::equal(dst, expected)) << n << " " << dtype;
      kernels::accumulate_(dst, src, /*overwrite=*/true);
      EXPECT_TRUE(torch::equal(dst, src.to(torch::kFloat))) << "overwrite " << n << " " << dtype;
    }
  }
}

// torch.optim.AdamW's update in float64 on the same values; returns {param, exp_avg, exp_avg_sq}.
std::vector<torch::Tensor> adamw_float64(torch::Tensor p, torch::Tensor g, torch::Tensor m, torch::Tensor v, double t,
                                         double lr, double b1, double b2, double eps, double wd, double grad_scale) {
  auto f64 = [](const torch::Tensor& x) { return x.to(torch::kCPU, torch::kDouble); };
  auto P = f64(p), G = f64(g) / grad_scale, M = f64(m), V = f64(v);
  P = P * (1.0 - lr * wd);
  M = b1 * M + (1.0 - b1) * G;
  V = b2 * V + (1.0 - b2) * G * G;
  auto denom = V.sqrt() / std::sqrt(1.0 - std::pow(b2, t)) + eps;
  P = P - (lr / (1.0 - std::pow(b1, t))) * M / denom;
  return {P, M, V};
}

TEST(FusedKernelsGpu, AdamwMatchesFloat64AndSkipsOnFoundInf) {
  REQUIRE_KERNELS();
  torch::manual_seed(10);
  const double lr = 1e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  for (int64_t n : {4096, 1001}) {
    for (auto gdt : {torch::kBFloat16, torch::kFloat}) {
      auto p = torch::randn({n}).to(torch::kCUDA) * 0.02, m = torch::zeros({n}).to(torch::kCUDA);
      auto v = torch::zeros({n}).to(torch::kCUDA);
      auto step = torch::zeros({}, p.options());
      for (int t = 1; t <= 3; ++t) {
        auto g = cuda_randn({n}, gdt);
        const double scale = t == 2 ? 4.0 : 1.0;  // step 2 divides its gradient (the clip coefficient's path)
        auto expected = adamw_float64(p, g, m, v, t, lr, b1, b2, eps, wd, scale);
        step.add_(1.0);
        torch::Tensor grad_scale = t == 2 ? torch::full({1}, scale, p.options()) : torch::Tensor();
        kernels::adamw_(p, g, m, v, step, lr, b1, b2, eps, wd, grad_scale, torch::zeros({1}, p.options()));
        EXPECT_LT(rel_diff(p, expected[0]), 1e-6) << n << " " << gdt << " step " << t;
        EXPECT_LT(rel_diff(m, expected[1]), 1e-6) << n << " " << gdt << " step " << t;
        EXPECT_LT(rel_diff(v, expected[2]), 1e-6) << n << " " << gdt << " step " << t;
      }
      auto before = torch::stack({p, m, v}).clone();
      kernels::adamw_(p, cuda_randn({n}, gdt), m, v, step, lr, b1, b2, eps, wd, torch::Tensor(),
                      torch::ones({1}, p.options()));
      EXPECT_TRUE(torch::equal(torch::stack({p, m, v}), before)) << "found_inf must leave everything as it was";
    }
  }
}

}  // namespace
}  // namespace models
}  // namespace enginery
