#pragma once
// Typed configuration handed to engines. Field names and defaults follow verl (verl/workers/config/*.py):
// the trainer parses TOML into these structs, engines only read them.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace enginery {

// verl HFModelConfig (subset). `path` is a Hugging Face model directory (config.json + *.safetensors) or a
// built-in tiny model such as "builtin:qwen2-tiny".
struct ModelConfig {
  std::string path = "builtin:qwen2-tiny";
  std::string tokenizer_path;  // unused by the engines; kept so verl configs load unchanged
  bool enable_gradient_checkpointing = false;  // verl defaults to true; off here so the CPU demo stays fast
  bool use_remove_padding = false;
  bool trust_remote_code = false;
  std::optional<std::string> override_dtype;  // dtype the weights are loaded in before sharding ("fp32" default)
};

// verl FSDPEngineConfig.mixed_precision. Strings are resolved with PrecisionType when the engine builds its
// module, so a bad value fails there with "unexpected precision: <value>".
struct MixedPrecisionConfig {
  std::string param_dtype = "bf16";
  std::string reduce_dtype = "fp32";
  std::string buffer_dtype = "fp32";
};

// Settings of the sharded gradient scaler used when param_dtype is fp16 (torch.amp.GradScaler's defaults).
struct GradScalerConfig {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 400;
  // "auto": a scaler exactly when param_dtype is fp16. "always": also for bf16/fp32 (a scaled fp32 run must
  // equal an unscaled one). "never": no scaler even for fp16 (at the user's risk).
  std::string enabled = "auto";
};

// verl EngineConfig + FSDPEngineConfig. One struct: every shipped engine is FSDP-based.
struct EngineConfig {
  std::string strategy = "fsdp";  // backend name the registry selects: "fsdp", "fsdp2", "veomni", ...
  int64_t micro_batch_size_per_gpu = 1;
  bool forward_only = false;
  int64_t seed = 42;
  bool use_dynamic_bsz = false;
  int64_t max_token_len_per_gpu = 16384;

  // FSDP
  std::optional<MixedPrecisionConfig> mixed_precision;  // absent -> bf16 / fp32 / fp32
  bool reshard_after_forward = true;
  int64_t fsdp_size = -1;  // -1: shard over the whole data-parallel group; N: HSDP, shard within groups of N
  bool param_offload = false;
  bool optimizer_offload = false;
  bool forward_prefetch = false;
  std::string model_dtype = "fp32";  // dtype of the sharded master parameters
  bool entropy_from_logits_with_chunking = true;
  GradScalerConfig grad_scaler;

  // Backend-specific settings from the TOML table [engine.<backend>], as strings; the backend's factory parses
  // them and rejects keys it does not know (naming "engine.<backend>.<key>").
  std::map<std::string, std::string> backend_options;
};

// verl OptimizerConfig / FSDPOptimizerConfig.
struct OptimizerConfig {
  std::string optimizer = "AdamW";
  double lr = 1e-3;
  double weight_decay = 0.01;
  double betas[2] = {0.9, 0.999};
  double eps = 1e-8;
  double clip_grad = 1.0;
  int64_t lr_warmup_steps = -1;  // -1: use lr_warmup_steps_ratio
  double lr_warmup_steps_ratio = 0.0;
  int64_t total_training_steps = 0;  // filled in by the trainer
  std::string lr_scheduler_type = "constant";  // "constant" | "cosine"
  double min_lr_ratio = 0.0;
  double num_cycles = 0.5;
};

// verl CheckpointConfig.
struct CheckpointConfig {
  std::vector<std::string> save_contents = {"model", "optimizer", "extra"};
  std::vector<std::string> load_contents = {"model", "optimizer", "extra"};
  bool async_save = false;
};

}  // namespace enginery
