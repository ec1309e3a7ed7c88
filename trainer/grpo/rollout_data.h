#pragma once
// What GRPO's rollout reads and writes besides the model: prompts cut from the task's examples, the rule-based
// reward, and the training batch built from the sampled sequences (host_api/batch.h alignment).
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "host_api/batch.h"
#include "models/generation.h"
#include "trainer/data/dataset.h"

namespace enginery {
namespace grpo {

struct Prompt {
  std::vector<int64_t> ids;        // the example up to its first target token
  std::vector<int64_t> reference;  // the example's target tokens: the one correct response, stop token included
};

// The prompt is everything before the first position with loss_mask 1 (the addition task: "<bos> a + b ="), the
// reference everything from there. An example without a target is an error naming `where`.
Prompt prompt_of(const Example& example, const std::string& where);

struct PromptBatch {
  torch::Tensor ids;   // [B * n, P] int64, left-padded with pad_id, each prompt n times in a row
  torch::Tensor mask;  // [B * n, P] int64, 1 on real tokens
};
PromptBatch repeat_prompts(const std::vector<Prompt>& prompts, int64_t n, int64_t pad_id);

// The rule-based reward: the fraction of the reference's tokens the response has in the same place (a missing or
// extra token counts as wrong), so 1 exactly when the answer is right, stop token included. Partial credit for
// each right digit gives a policy that is rarely right outright a signal to improve on, where an all-or-nothing
// score would leave nearly every group at one value, hence zero advantage.
double answer_reward(const std::vector<int64_t>& response, const std::vector<int64_t>& reference);

// Scores every row of `gen` (row i answers prompts[i / n]) as float64 [B * n].
torch::Tensor score_responses(const models::GenerationResult& gen, const std::vector<Prompt>& prompts, int64_t n);

// input_ids and attention_mask of the sampled sequences, and loss_mask (float) 1 on the response tokens up to and
// including the stop token: log_probs[b, t] is the log-prob of the token at t, so the targets are exactly the
// response positions P .. P + N - 1.
Batch rollout_batch(const models::GenerationResult& gen);

}  // namespace grpo
}  // namespace enginery
