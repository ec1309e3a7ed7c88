// generate() in bf16 on the GPU, as `enginery generate --device cuda --dtype bf16` and GRPO's rollout run it:
// greedy decoding through the KV cache picks, at every step, the fp32 reference's argmax up to the bf16 forward's
// own error at that step. Skips without a GPU.
#include <gtest/gtest.h>

#include "models/generation.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

std::shared_ptr<CausalLM> fixture(const std::string& name, c10::ScalarType dtype, torch::Device device) {
  ModelConfig cfg;
  cfg.path = testing::data_dir(name);
  cfg.override_dtype = dtype;
  auto model = std::dynamic_pointer_cast<CausalLM>(build_model(cfg, "language_model", {device}));
  model->eval();
  return model;
}

TEST(GenerationGpu, Bf16GreedyOnCudaPicksTheFp32ArgmaxUpToItsForwardError) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string name : {"hf_llama_gqa", "hf_qwen2_tied", "hf_qwen3_qknorm"}) {
    SCOPED_TRACE(name);
    auto gpu = fixture(name, c10::kBFloat16, torch::Device(torch::kCUDA, 0));
    auto ref = fixture(name, c10::kFloat, torch::kCPU);
    // Four left-padded prompts of 5, 1, 9 and 3 tokens.
    const std::vector<int64_t> lengths = {5, 1, 9, 3};
    const int64_t b = 4, p = 9, vocab = gpu->args().vocab_size;
    torch::manual_seed(11);
    auto ids = torch::randint(1, vocab, {b, p}, torch::kLong);
    auto mask = torch::zeros({b, p}, torch::kLong);
    for (int64_t i = 0; i < b; ++i) {
      ids[i].narrow(0, 0, p - lengths[i]).fill_(0);
      mask[i].narrow(0, p - lengths[i], lengths[i]).fill_(1);
    }
    SamplingParams sp;
    sp.greedy = true;
    sp.max_new_tokens = 10;
    auto r = generate(*gpu, ids.cuda(), mask.cuda(), sp);
    ASSERT_EQ(r.sequences.scalar_type(), torch::kLong);
    auto seqs = r.sequences.cpu(), masks = r.attention_mask.cpu();
    int64_t agree = 0;
    for (int64_t j = 0; j < sp.max_new_tokens; ++j) {
      auto prefix = seqs.narrow(1, 0, p + j), prefix_mask = masks.narrow(1, 0, p + j);
      auto want = testing::full_forward_logits(*ref, prefix, prefix_mask);
      auto got = testing::full_forward_logits(*gpu, prefix.cuda(), prefix_mask.cuda()).to(torch::kCPU, torch::kFloat);
      for (int64_t i = 0; i < b; ++i) {
        const double error = (got[i] - want[i]).abs().max().item<double>();
        const double range = (want[i].max() - want[i].min()).item<double>();
        EXPECT_LT(error, 0.05 * range) << "row " << i << " step " << j << ": bf16 logits far from fp32";
        const int64_t chosen = seqs[i][p + j].item<int64_t>();
        const double gap = (want[i].max() - want[i][chosen]).item<double>();
        EXPECT_LE(gap, 2 * error + 1e-6) << "row " << i << " step " << j << ": token " << chosen << " is "
                                         << gap << " below the fp32 argmax; the bf16 forward errs by " << error;
        agree += want[i].argmax().item<int64_t>() == chosen;
      }
    }
    std::cout << name << ": bf16 greedy on cuda chose fp32's argmax at " << agree << " of " << b * sp.max_new_tokens
              << " steps\n";
  }
}

}  // namespace
}  // namespace models
}  // namespace enginery
