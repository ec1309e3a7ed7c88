#pragma once
// Typed configuration handed to engines (docs/ARCHITECTURE.md, "Configuration"), with verl's names and defaults;
// hosts parse text into these types once, so engines never see a dtype or enum as a string.
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace enginery {

using ScalarValue = std::variant<bool, int64_t, double, std::string>;  // backend options, batch metadata

// Where the weights come from: `model.path` resolved once by ModelConfig::source().
struct ModelSource {
  enum class Kind { kHfDirectory, kBuiltin };
  Kind kind = Kind::kBuiltin;
  std::string name;  // the directory, or the built-in's name without the "builtin:" prefix
  bool is_builtin() const { return kind == Kind::kBuiltin; }
};

// verl HFModelConfig (subset). `path`: a Hugging Face directory (config.json, *.safetensors) or "builtin:<name>".
struct ModelConfig {
  std::string path = "builtin:qwen2-tiny";
  std::string tokenizer_path;  // unused by the engines; kept so verl configs load unchanged
  bool enable_gradient_checkpointing = false;  // verl defaults to true; off here so the CPU demo stays fast
  bool use_remove_padding = false;
  bool trust_remote_code = false;
  std::optional<c10::ScalarType> override_dtype;  // dtype the weights are loaded in before sharding (fp32 default)
  ModelSource source() const;
};

// verl FSDPEngineConfig.mixed_precision. The defaults are written here and nowhere else.
struct MixedPrecisionConfig {
  c10::ScalarType param_dtype = c10::kBFloat16;  // the compute (autocast) dtype; fp32 = no autocast at all
  c10::ScalarType reduce_dtype = c10::kFloat;
  c10::ScalarType buffer_dtype = c10::kFloat;
};

// "auto": a scaler exactly when param_dtype is fp16. "always": also for bf16/fp32 (a scaled fp32 run must equal an
// unscaled one). "never": no scaler even for fp16, the one way to run fp16 unscaled (at the user's risk).
enum class ScalerMode { kAuto, kAlways, kNever };
const char* to_string(ScalerMode mode);

// The sharded gradient scaler's settings (torch.amp.GradScaler's defaults).
struct GradScalerConfig {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 400;
  ScalerMode enabled = ScalerMode::kAuto;
};

// verl EngineConfig + FSDPEngineConfig: every key is honoured by the engine or refused by name (config_support.h).
struct EngineConfig {
  std::string strategy = "fsdp";  // the registry backend name (as verl): "fsdp", "fsdp2", "veomni", ...
  int64_t micro_batch_size_per_gpu = 1;
  bool forward_only = false;
  int64_t seed = 42;
  bool use_dynamic_bsz = false;
  int64_t max_token_len_per_gpu = 16384;
  // FSDP
  MixedPrecisionConfig mixed_precision;
  bool reshard_after_forward = true;
  int64_t fsdp_size = -1;  // -1: shard over the whole data-parallel group; N: HSDP, shard within groups of N
  bool param_offload = false;
  bool optimizer_offload = false;
  bool forward_prefetch = false;
  c10::ScalarType model_dtype = c10::kFloat;  // dtype of the sharded master parameters
  bool entropy_from_logits_with_chunking = true;
  GradScalerConfig grad_scaler;
  // Backend-specific settings, [engine.<backend>], typed as written; the registry refuses names the engine does not
  // declare (ConfigSupport::backend_options), backend_option() reads one.
  std::map<std::string, ScalarValue> backend_options;
};

// engine.backend_options[key] as T (bool, int64_t, double, which an integer also gives, or std::string), `fallback`
// when absent. Throws EngineryError naming engine.<strategy>.<key> and the type when it holds another.
template <typename T>
T backend_option(const EngineConfig& engine, const std::string& key, T fallback);

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

// verl CheckpointConfig, and what a checkpoint holds by verl's names (hf_model: a Hugging Face copy, saved only).
inline constexpr const char *kContentModel = "model", *kContentOptimizer = "optimizer", *kContentExtra = "extra",
                            *kContentHfModel = "hf_model";
struct CheckpointConfig {
  std::vector<std::string> save_contents = {kContentModel, kContentOptimizer, kContentExtra};
  std::vector<std::string> load_contents = save_contents;
  bool async_save = false;
};

}  // namespace enginery
