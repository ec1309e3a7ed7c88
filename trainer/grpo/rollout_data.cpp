#include "trainer/grpo/rollout_data.h"

#include <algorithm>

#include "host_api/error.h"

namespace enginery {
namespace grpo {

Prompt prompt_of(const Example& example, const std::string& where) {
  const auto& mask = example.loss_mask;
  const auto first = std::find_if(mask.begin(), mask.end(), [](float m) { return m != 0.0f; });
  if (first == mask.end() || first == mask.begin()) {
    throw EngineryError("an example has no target tokens after a prompt", where,
                        "examples whose loss_mask marks the answer");
  }
  const auto split = static_cast<size_t>(first - mask.begin());
  Prompt p;
  p.ids.assign(example.input_ids.begin(), example.input_ids.begin() + static_cast<std::ptrdiff_t>(split));
  p.reference.assign(example.input_ids.begin() + static_cast<std::ptrdiff_t>(split), example.input_ids.end());
  return p;
}

PromptBatch repeat_prompts(const std::vector<Prompt>& prompts, int64_t n, int64_t pad_id) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.ids.size());
  const int64_t rows = static_cast<int64_t>(prompts.size()) * n;
  const int64_t width = static_cast<int64_t>(longest);
  PromptBatch out;
  out.ids = torch::full({rows, width}, pad_id, torch::kLong);
  out.mask = torch::zeros({rows, width}, torch::kLong);
  auto ids = out.ids.accessor<int64_t, 2>();
  auto mask = out.mask.accessor<int64_t, 2>();
  for (int64_t row = 0; row < rows; ++row) {
    const auto& p = prompts[static_cast<size_t>(row / n)].ids;
    const int64_t offset = width - static_cast<int64_t>(p.size());  // left padding: generation continues at the end
    for (size_t t = 0; t < p.size(); ++t) {
      ids[row][offset + static_cast<int64_t>(t)] = p[t];
      mask[row][offset + static_cast<int64_t>(t)] = 1;
    }
  }
  return out;
}

double answer_reward(const std::vector<int64_t>& response, const std::vector<int64_t>& reference) {
  if (reference.empty()) return response.empty() ? 1.0 : 0.0;
  size_t right = 0;
  for (size_t i = 0; i < reference.size() && i < response.size(); ++i) right += response[i] == reference[i] ? 1 : 0;
  // Tokens past the reference's end push a right prefix below 1.
  const size_t length = std::max(reference.size(), response.size());
  return static_cast<double>(right) / static_cast<double>(length);
}

torch::Tensor score_responses(const models::GenerationResult& gen, const std::vector<Prompt>& prompts, int64_t n) {
  const torch::Tensor sequences = gen.sequences.to(torch::kCPU);
  const torch::Tensor lengths = gen.response_lengths.to(torch::kCPU);
  const int64_t rows = sequences.size(0);
  const int64_t begin = sequences.size(1) - gen.response_mask.size(1);
  if (rows != static_cast<int64_t>(prompts.size()) * n) {
    throw EngineryError("the rollout returned " + std::to_string(rows) + " rows for " +
                            std::to_string(prompts.size()) + " prompts x " + std::to_string(n),
                        "grpo rollout");
  }
  torch::Tensor scores = torch::zeros({rows}, torch::kDouble);
  for (int64_t row = 0; row < rows; ++row) {
    const torch::Tensor tokens = sequences[row].slice(0, begin, begin + lengths[row].item<int64_t>()).contiguous();
    const std::vector<int64_t> response(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + tokens.numel());
    scores[row] = answer_reward(response, prompts[static_cast<size_t>(row / n)].reference);
  }
  return scores;
}

Batch rollout_batch(const models::GenerationResult& gen) {
  const int64_t rows = gen.sequences.size(0);
  const int64_t prompt_len = gen.sequences.size(1) - gen.response_mask.size(1);
  const auto float_options = torch::TensorOptions().dtype(torch::kFloat).device(gen.sequences.device());
  Batch batch;
  batch.set("input_ids", gen.sequences);
  batch.set("attention_mask", gen.attention_mask);
  batch.set("loss_mask", torch::cat({torch::zeros({rows, prompt_len}, float_options),
                                     gen.response_mask.to(float_options)},
                                    1));
  return batch;
}

}  // namespace grpo
}  // namespace enginery
