#pragma once
// What the configured model accepts: data is checked against it when opened (every .jsonl row, the built-in task, a
// .bin file's window length) or read (a .bin window's ids), and batches handed to an engine through the Python module
// too, so a bad id or an overlong sequence is an error naming the file, never an index error deep inside the model or
// a huge allocation.
#include <cstdint>
#include <string>

#include "config/train_config.h"

namespace enginery {

struct TokenLimits {
  int64_t vocab_size = 0;     // ids must lie in [0, vocab_size); 0: unchecked
  int64_t max_positions = 0;  // no sequence longer than this (max_position_embeddings); 0: unchecked
  std::string model;          // which model, for messages: "model.path = ..."
};

// The model's vocabulary size and max_position_embeddings (its config.json, or the built-in's).
TokenLimits model_token_limits(const TrainConfig& config);

}  // namespace enginery
