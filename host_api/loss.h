#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "host_api/batch.h"
#include "host_api/model_output.h"

namespace enginery {

// What the host's loop tells the engine and the loss about the whole call (docs/ARCHITECTURE.md, "One step").
struct LossContext {
  // Number of target tokens (loss_mask's ones, batch.h) over all micro-batches of this call on all data-parallel
  // ranks, all-reduced once before the first micro-batch (verl's batch_num_tokens).
  double global_num_tokens = 0.0;
  std::vector<int64_t> rows;  // the call's batch rows (sequences) in this micro-batch, in order
  int64_t dp_size = 1;
  int64_t micro_batch_index = 0;
  int64_t num_micro_batches = 1;
  // The batch's `calculate_entropy` metadata (verl's name): whether the model should also emit entropy.
  bool calculate_entropy = false;
  bool is_last_micro_batch() const { return micro_batch_index + 1 == num_micro_batches; }
};

struct LossResult {
  // A scalar ([Note: micro-batch loss scaling], engine_driver/step_loop.cpp): the sum over this micro-batch's
  // target tokens divided by ctx.global_num_tokens, so the losses of every micro-batch on every rank add up to the
  // global token mean. Engines sum gradients over ranks (never average): world size N equals world size 1.
  torch::Tensor loss;
  std::map<std::string, torch::Tensor> metrics;  // scalar tensors; read on the host only when reported
};

using LossFn = std::function<LossResult(const ModelOutput& output, const Batch& micro_batch, const LossContext& ctx)>;

}  // namespace enginery
