#pragma once
#include <torch/types.h>

namespace enginery {

// What a model's forward hands to the loss: per-token tensors [N] of a packed batch, aligned as batch.h's
// [Note: packed batch] says. Tensors a head does not produce stay undefined.
struct ModelOutput {
  torch::Tensor log_probs;  // language_model
  torch::Tensor entropy;    // language_model, when asked
  torch::Tensor values;     // value_model
};

}  // namespace enginery
