// model.use_remove_padding on the GPU: packed rows through aten's varlen flash kernel (bf16, fp16) and the per-sequence
// path (fp32) against the padded model on the same batch — outputs, loss and every gradient; a packed input
// (cu_seqlens) likewise. Skips without CUDA.
#include <gtest/gtest.h>

#include <iostream>

#include "models/model_factory.h"
#include "packed_compare.h"

namespace enginery {
namespace models {
namespace {

std::shared_ptr<CausalLM> builtin_on_cuda(const std::string& name, const std::string& type) {
  ModelConfig cfg;
  cfg.path = "builtin:" + name;
  auto model = std::dynamic_pointer_cast<CausalLM>(build_model(cfg, type));
  model->to(torch::kCUDA);
  return model;
}

// Long enough that the kernels tile each sequence; one sequence of one token; left and right padding.
ModelInputs ragged_on_cuda(int64_t seq_len) {
  torch::manual_seed(3);
  const std::vector<int64_t> lengths{seq_len, 17, 1, seq_len - 50, seq_len / 2};
  const int64_t b = static_cast<int64_t>(lengths.size());
  auto ids = torch::randint(0, 256, {b, seq_len}, torch::kLong);
  auto mask = torch::zeros({b, seq_len}, torch::kLong);
  for (int64_t i = 0; i < b; ++i) mask[i].narrow(0, i % 2 ? seq_len - lengths[i] : 0, lengths[i]).fill_(1);
  return {ids.cuda(), mask.cuda(), torch::Tensor()};
}

void report(const std::string& what, const testing::PackedComparison& c) {
  std::cout << what << ": relative error outputs " << c.outputs << ", loss " << c.loss << ", worst gradient "
            << c.grads << " (" << c.worst_grad << ")\n";
}

TEST(PackedGpu, Bf16VarlenFlashMatchesPaddedSdpa) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(compat::kHasVarlenFlash) << "a CUDA build of LibTorch 2.1+ has the varlen flash kernel";
  const auto bf16_cuda = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  EXPECT_TRUE(compat::varlen_flash_applies(torch::zeros({4, 2, 16}, bf16_cuda)));
  for (const char* name : {"llama-tiny", "qwen3-tiny"}) {
    for (const auto dtype : {c10::kBFloat16, c10::kHalf}) {
      auto model = builtin_on_cuda(name, "language_model");
      const auto c = testing::compare_packed_with_padded(*model, ragged_on_cuda(320), dtype);
      const std::string what = std::string(name) + " " + c10::toString(dtype);
      report(what, c);
      EXPECT_LT(c.outputs, 2e-2) << what;
      EXPECT_LT(c.loss, 2e-2) << what;
      EXPECT_LT(c.grads, 5e-2) << what << " " << c.worst_grad;
    }
  }
  auto critic = builtin_on_cuda("qwen2-tiny", "value_model");
  const auto c = testing::compare_packed_with_padded(*critic, ragged_on_cuda(320), c10::kBFloat16);
  report("qwen2-tiny value bf16", c);
  EXPECT_LT(c.outputs, 2e-2);
  EXPECT_LT(c.grads, 5e-2) << c.worst_grad;
}

TEST(PackedGpu, Fp32PerSequencePathMatchesPadded) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto model = builtin_on_cuda("qwen2-tiny", "language_model");
  const auto c = testing::compare_packed_with_padded(*model, ragged_on_cuda(160), c10::kFloat);
  report("qwen2-tiny fp32", c);
  EXPECT_LT(c.outputs, 1e-4);
  EXPECT_LT(c.loss, 1e-4);
  EXPECT_LT(c.grads, 1e-4) << c.worst_grad;
}

// A packed input (cu_seqlens, host_api/batch.h's [Note: packed batch]) with an empty and a one-token sequence:
// remove_padding on runs it through the varlen flash kernel, off pads it to [S, longest] for the padded SDPA path;
// both give [N] in verl's alignment.
TEST(PackedGpu, PackedInputVarlenFlashMatchesItsPaddedPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(4);
  const std::vector<int64_t> lengths{320, 17, 0, 1, 270, 160};
  std::vector<int64_t> cu{0};
  for (int64_t len : lengths) cu.push_back(cu.back() + len);
  ModelInputs in;
  in.input_ids = torch::randint(0, 256, {cu.back()}, torch::kLong).cuda();
  in.cu_seqlens = torch::tensor(cu, torch::kLong);
  for (const char* name : {"llama-tiny", "qwen3-tiny"}) {
    auto model = builtin_on_cuda(name, "language_model");
    const auto c = testing::compare_packed_with_padded(*model, in, c10::kBFloat16);
    const std::string what = std::string(name) + " packed input bf16";
    report(what, c);
    EXPECT_LT(c.outputs, 2e-2) << what;
    EXPECT_LT(c.loss, 2e-2) << what;
    EXPECT_LT(c.grads, 5e-2) << what << " " << c.worst_grad;
  }
  auto critic = builtin_on_cuda("qwen2-tiny", "value_model");
  const auto c = testing::compare_packed_with_padded(*critic, in, c10::kBFloat16);
  report("qwen2-tiny value, packed input bf16", c);
  EXPECT_LT(c.outputs, 2e-2);
  EXPECT_LT(c.grads, 5e-2) << c.worst_grad;
}

}  // namespace
}  // namespace models
}  // namespace enginery
