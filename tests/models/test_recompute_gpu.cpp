// The activation-checkpointing policies on the GPU (models::Recompute): with bf16 autocast and enginery's fused
// kernels, what the forward keeps for backward shrinks from no checkpointing to "mlp" to "layer", and both policies
// give the gradients of no checkpointing. Skips without CUDA.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <string>

#include "models/causal_lm.h"
#include "models/model_factory.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {
namespace {

struct PolicyRun {
  int64_t kept_bytes = 0;  // allocated after forward minus before: the activations kept for backward and the loss
  std::map<std::string, torch::Tensor> grads;
};

PolicyRun run_policy(bool checkpointing, const std::string& policy) {
  ModelConfig cfg;
  cfg.path = "builtin:qwen2-tiny";
  cfg.enable_gradient_checkpointing = checkpointing;
  auto model = std::dynamic_pointer_cast<CausalLM>(build_model(cfg, "language_model"));  // seeded: same weights
  if (checkpointing && policy == "mlp") model->set_recompute(Recompute::kMlp);
  model->to(torch::kCUDA);
  torch::manual_seed(12);
  ModelInputs in{torch::randint(0, 256, {4, 1024}, torch::kLong).cuda(), torch::Tensor(), torch::Tensor()};
  PolicyRun run;
  torch::cuda::synchronize();
  const int64_t before = compat::cuda_allocated_bytes(0);
  torch::Tensor loss;
  {
    compat::AutocastScope autocast(torch::kCUDA, torch::kBFloat16);
    loss = -model->forward(in, {}, nullptr).log_probs.sum();
  }
  torch::cuda::synchronize();
  run.kept_bytes = compat::cuda_allocated_bytes(0) - before;
  loss.backward();
  for (auto& p : model->named_parameters()) run.grads[p.key()] = p.value().grad().to(torch::kCPU, torch::kDouble);
  return run;
}

TEST(RecomputeGpu, MlpPolicyKeepsLessThanNoneAndMoreThanLayerWithTheSameGradients) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const PolicyRun none = run_policy(false, "layer");
  const PolicyRun layer = run_policy(true, "layer");
  const PolicyRun mlp = run_policy(true, "mlp");
  std::cout << "kept for backward: none " << none.kept_bytes << " bytes, mlp " << mlp.kept_bytes << ", layer "
            << layer.kept_bytes << "\n";
  EXPECT_LT(mlp.kept_bytes, none.kept_bytes);
  EXPECT_LT(layer.kept_bytes, mlp.kept_bytes);
  // bf16 activations: the recomputed path rounds in a different order (the product is kept, not recomputed), so
  // compare relative to each gradient's largest element.
  for (const auto* run : {&layer, &mlp}) {
    for (const auto& [name, g] : none.grads) {
      const double scale = g.abs().max().item<double>();
      const double diff = (run->grads.at(name) - g).abs().max().item<double>();
      EXPECT_LE(diff, 2e-2 * scale + 1e-6) << (run == &mlp ? "mlp " : "layer ") << name;
    }
  }
}

}  // namespace
}  // namespace models
}  // namespace enginery
