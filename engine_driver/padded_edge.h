#pragma once
// The host's padded batch at the edge of the loop (host_api/batch.h, [Note: packed batch]): packed before any engine
// sees it, and the packed outputs handed back padded, to the caller's loss function and to the caller, with
// log_probs[s, t] and entropy[s, t] for token t itself (0 at a row's first real token and at padding) and
// values[s, t] at token t. The CLI's data, the conformance suite and Python callers with padded tensors use it.
#include <map>
#include <string>

#include "host_api/batch.h"
#include "host_api/loss.h"

namespace enginery {

class PaddedEdge {
 public:
  // `padded` passed check_batch: input_ids and attention_mask [S, T], every row with a real token.
  explicit PaddedEdge(const Batch& padded);

  // input_ids, position_ids (when given), loss_mask (per token; a row's first real token never a target) and
  // cu_seqlens of the real tokens; the other tensors (attention_mask, loss inputs) per sequence, padded; metadata.
  const Batch& packed() const { return packed_; }
  // The caller's loss, called with the micro-batch's padded rows (LossContext::rows) and padded outputs.
  LossFn padded_loss(LossFn loss) const;
  // The call's packed outputs (every row, in batch order) as [S, T].
  std::map<std::string, torch::Tensor> padded_outputs(const std::map<std::string, torch::Tensor>& packed) const;

 private:
  Batch padded_, packed_;
};

// Packed outputs [n] of the rows whose real tokens `valid` [R, T] marks, as [R, T] (differentiable): log_probs
// and entropy move from the token before (verl's alignment) to the token itself, values stay.
torch::Tensor to_padded(const std::string& name, const torch::Tensor& packed, const torch::Tensor& valid);

}  // namespace enginery
