#include "config/model_limits.h"

#include "models/model_args.h"

namespace enginery {

TokenLimits model_token_limits(const TrainConfig& c) {
  const models::ModelArgs args = models::args_of(c.model.source());
  TokenLimits limits;
  limits.vocab_size = args.vocab_size;
  limits.max_positions = args.max_position_embeddings;
  limits.model = "model.path = " + c.model.path;
  return limits;
}

}  // namespace enginery
