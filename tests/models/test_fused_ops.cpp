// The fused decoder pieces (models/fused_ops.h) compute what the plain composition of ATen ops computes, in values
// and in gradients.
#include <gtest/gtest.h>

#include "test_util.h"
#include "models/fused_ops.h"

namespace enginery {
namespace models {
namespace {

using testing::max_diff;

void check_swiglu(torch::Dtype dtype, double tol) {
  torch::manual_seed(7);
  auto gate = (torch::randn({3, 5, 24}, torch::kDouble) * 3).to(dtype).requires_grad_(true);
  auto up = torch::randn({3, 5, 24}, torch::kDouble).to(dtype).requires_grad_(true);
  auto g = torch::randn({3, 5, 24}, torch::kDouble).to(dtype);
  auto ref = torch::silu(gate) * up;
  auto ref_grads = torch::autograd::grad({ref}, {gate, up}, {g});
  auto out = swiglu(gate, up);
  auto grads = torch::autograd::grad({out}, {gate, up}, {g});
  EXPECT_EQ(out.scalar_type(), dtype);
  EXPECT_LE(max_diff(out, ref), tol);
  EXPECT_LE(max_diff(grads[0], ref_grads[0]), tol);
  EXPECT_LE(max_diff(grads[1], ref_grads[1]), tol);
}

TEST(FusedOps, SwigluEqualsSiluTimesUpInFloat64) { check_swiglu(torch::kDouble, 1e-12); }

// Same kernels in the same order as autograd's: bit-identical in bf16 as well.
TEST(FusedOps, SwigluEqualsSiluTimesUpInBf16) { check_swiglu(torch::kBFloat16, 0.0); }

TEST(FusedOps, SwigluWithoutGradIsPlainForward) {
  torch::NoGradGuard no_grad;
  auto gate = torch::randn({4, 8}), up = torch::randn({4, 8});
  EXPECT_LE(max_diff(swiglu(gate, up), torch::silu(gate) * up), 0.0);
}

TEST(FusedOps, FusedRmsNormNeverAppliesOnCpu) {
  EXPECT_FALSE(fused_rms_norm_applies(torch::randn({2, 4}), torch::ones({4})));
}

}  // namespace
}  // namespace models
}  // namespace enginery
