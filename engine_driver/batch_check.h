#pragma once
// What the host's loop refuses before any work (docs/ARCHITECTURE.md, "One step", batch checks): a batch that
// breaks batch.h's layout, named by the field, the row and the allowed values. Without it the same batch fails deep
// in a forward (an id outside the vocabulary: a bare IndexError; a short position_ids: a tensor-size error) or
// trains silently wrong (a weighted mask, a float id cast to an integer, a target on padding).
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "host_api/batch.h"
#include "host_api/error.h"

namespace enginery {

// What the host knows of the model the batch is for, beyond the batch itself.
struct BatchLimits {
  int64_t vocab_size = 0;  // token ids must lie in [0, vocab_size); 0: not known, ids are only checked >= 0
};

// Throws EngineryError for the first thing wrong with `batch` for an engine computing on `device`:
// - no rows; a 0-dim tensor; a tensor neither on the CPU nor on `device`'s type (the meta device);
// - input_ids missing, not [rows, tokens >= 1], not int64/int32, an id outside [0, vocab_size);
// - attention_mask missing; attention_mask, position_ids, loss_mask and the loss inputs of batch.h (old_log_probs,
//   ref_log_probs, advantages, returns, values) not of input_ids' shape; position_ids not int64/int32;
// - a mask holding anything but 0 and 1; loss_mask missing when `needs_targets` (a loss function is given: the
//   normaliser counts its targets); a target (position >= 1) on padding, which has no log-prob; a floating loss
//   input that is not finite.
// The per-row verdicts are read from the device once; only a refused batch reads more, to name the token.
void check_batch(const Batch& batch, const torch::Device& device, const BatchLimits& limits, bool needs_targets);

// The refusal of a nested (jagged) tensor as batch entry `name`; a Python host raises it while converting, before
// the tensor's sizes are read (torch's jagged tensors have none to give).
EngineryError nested_tensor_refused(const std::string& name);

}  // namespace enginery
