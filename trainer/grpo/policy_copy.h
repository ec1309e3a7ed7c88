#pragma once
// The two unsharded copies of the policy GRPO keeps on every rank besides the sharded actor engine: the rollout
// model that samples responses, refreshed from the actor every step through its weight stream (never a checkpoint
// on disk), and the frozen reference model of the KL loss, loaded once from model.path as verl's ref worker is.
#include <torch/torch.h>

#include <memory>
#include <string>

#include "host_api/base_engine.h"
#include "models/causal_lm.h"
#include "config/train_config.h"

namespace enginery {
namespace grpo {

class PolicyCopy {
 public:
  // models::build_model from config.model in `dtype` on `device`, with the engine's seed, so a built-in model
  // starts from the same weights as the actor.
  PolicyCopy(const TrainConfig& config, const torch::Device& device, c10::ScalarType dtype,
             const std::string& role);

  // Copies the actor's current weights in (BaseEngine::export_weights in this copy's dtype). Collective: every
  // rank drains the whole stream, and only then reports a name or shape this copy does not have.
  void load_from(BaseEngine& engine);

  // Per-token log-probs of `batch` (input_ids, attention_mask) at its batch_temperature(), under no-grad, in rows of
  // at most `rows_per_call`, as float32 [batch, seq] (host_api/batch.h alignment).
  torch::Tensor log_probs(const Batch& batch, int64_t rows_per_call);

  models::CausalLM& model() { return *model_; }

 private:
  std::shared_ptr<models::CausalLM> model_;
  c10::ScalarType dtype_;
  std::string role_;  // "rollout" | "reference", for messages
};

}  // namespace grpo
}  // namespace enginery
