#pragma once
// Log-probs and entropies of whole token sequences of any lengths: batching and padding are done here. Used by
// `enginery logprobs`.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/decoder_model.h"

namespace enginery {
namespace models {

struct SequenceScores {
  // log_probs[i][t] = log p(tokens[i][t+1] | tokens[i][0..t]); entropy[i][t] that distribution's entropy;
  // t = 0 .. len(tokens[i]) - 2 (empty for sequences shorter than 2).
  std::vector<std::vector<double>> log_probs;
  std::vector<std::vector<double>> entropy;
};

struct ScoreOptions {
  torch::Device device = torch::kCPU;
  c10::ScalarType compute_dtype = c10::kFloat;  // bf16: autocast
  int64_t max_batch_tokens = 8192;              // padded tokens per forward
};

SequenceScores score_sequences(DecoderModel& model, const std::vector<std::vector<int64_t>>& tokens,
                               const ScoreOptions& options = {});

}  // namespace models
}  // namespace enginery
