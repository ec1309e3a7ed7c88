#include "config/model_limits.h"

#include "models/model_args.h"

namespace enginery {

TokenLimits model_token_limits(const TrainConfig& c) {
  const ModelSource source = c.model.source();
  const models::ModelArgs args =
      source.is_builtin() ? models::builtin_args(source.name) : models::read_hf_config(source.name);
  TokenLimits limits;
  limits.vocab_size = args.vocab_size;
  limits.max_positions = args.max_position_embeddings;
  limits.model = "model.path = " + c.model.path;
  return limits;
}

}  // namespace enginery
