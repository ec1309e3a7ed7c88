#pragma once
// Fixed synthetic batches, the losses the checks train with, and parameter snapshots read through
// get_per_tensor_param (the only window the contract gives onto an engine's weights).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "conformance/target.h"
#include "engine_driver/step_loop.h"
#include "host_api/base_engine.h"

namespace enginery {
namespace conformance {

// Token ids are drawn from [1, kTokenLimit): the model's vocabulary must be at least this large.
constexpr int64_t kTokenLimit = 128;

// `rows` right-padded rows of `seq` tokens with different lengths; loss_mask marks the tokens after a 3-token
// prompt (position 0 never, as batch.h requires). Value models also get "returns" in [-1, 1]. On the target's
// device. The same seed gives the same batch.
Batch make_batch(const Target& target, int64_t rows = 4, int64_t seq = 16, uint64_t seed = 1234);

// The real tokens of make_batch's right-padded rows as the packed batch engines receive ([Note: packed batch] in
// host_api/batch.h), written out sequence by sequence; "returns" per token.
Batch packed_batch(const Batch& padded);

// "log_probs" for language models, "values" for value models.
const char* head_name(const Target& target);
const torch::Tensor& head_of(const Target& target, const ModelOutput& output);
// The head output of a whole batch (micro-batches concatenated), or a failure message when it is missing.
torch::Tensor head_of(const Target& target, const BatchOutput& output);

// Sum over the target tokens of the per-token loss: -log_prob (SFT) or 0.5 (value - return)^2. On a packed batch
// log_probs[t] is token t + 1's, so it counts where token t + 1 is a target.
torch::Tensor token_loss_sum(const Target& target, const torch::Tensor& head, const Batch& batch);
// The contract's loss: token_loss_sum / ctx.global_num_tokens.
LossFn token_mean_loss(const Target& target);
// token_loss_sum / `normaliser` whatever the call: sums of such losses over calls are one loss.
LossFn fixed_normaliser_loss(const Target& target, double normaliser);
// `inner` times `factor` (NaN or inf poison a step).
LossFn scaled_loss(LossFn inner, double factor);
// The global token mean of a whole batch computed here in float64 from the engine's head output.
double reference_mean_loss(const Target& target, const torch::Tensor& head, const Batch& batch);
double target_tokens(const Batch& batch);

using ParamList = std::vector<std::pair<std::string, torch::Tensor>>;
// Every full parameter by name, copied to the CPU (the visitor's tensor may be a reused buffer).
ParamList read_params(BaseEngine& engine);
// "" when `a` and `b` have the same names and shapes and |a - b| <= atol + rtol |b| everywhere (bitwise when both
// are 0); otherwise what differs first and by how much.
std::string diff_params(const ParamList& a, const ParamList& b, double atol = 0.0, double rtol = 0.0);
bool all_finite(const ParamList& params);
// max |a - b| over the elements where `mask` is set (mask broadcastable), in float64.
double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask = {});

}  // namespace conformance
}  // namespace enginery
