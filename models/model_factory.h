#pragma once
// Building models from a Hugging Face directory or a built-in tiny config, and writing them back in HF format.
#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>
#include <string>

#include "host_api/config.h"
#include "models/decoder_model.h"

namespace enginery {
namespace models {

struct BuildOptions {
  torch::Device device = torch::kCPU;
  int64_t seed = 42;  // random init of built-in models and of a value head the checkpoint lacks
};

// cfg.path: an HF model directory (config.json + model.safetensors or a sharded index) or "builtin:<name>".
// model_type: "language_model" | "value_model". Parameters are loaded in cfg.override_dtype (default fp32);
// cfg.enable_gradient_checkpointing turns on per-layer recomputation (models::Recompute::kLayer; an engine may
// choose another policy after building).
std::shared_ptr<DecoderModel> build_model(const ModelConfig& cfg, const std::string& model_type,
                                          const BuildOptions& options = {});

// Writes config.json and the weights (in the config's dtype) to `dir`; sharded with model.safetensors.index.json
// when the weights exceed max_shard_bytes (> 0). What load reads back is bit-identical.
void save_hf(DecoderModel& model, const std::string& dir, int64_t max_shard_bytes = 0);
// The same with the weights given by Hugging Face name (any dtype and device; cast to the config's dtype), for a
// model whose own parameters do not hold them (a sharded engine gathers them first). Every parameter of `model`
// must be named in `weights`.
void save_hf(DecoderModel& model, const std::string& dir,
             const std::vector<std::pair<std::string, torch::Tensor>>& weights, int64_t max_shard_bytes);

}  // namespace models
}  // namespace enginery
