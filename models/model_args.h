#pragma once
// The architecture of a decoder LM as read from a Hugging Face config.json (llama, qwen2, qwen3) or taken from a
// built-in tiny config. Both config.json forms found in the wild are read: the long-standing one (rope_theta,
// rope_scaling, torch_dtype) and the transformers 5 one (rope_parameters, dtype).
#include <cstdint>
#include <string>

namespace enginery {
namespace models {

struct RopeArgs {
  std::string type = "default";  // "default" | "llama3" | "linear"
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelArgs {
  std::string model_type;  // "llama" | "qwen2" | "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // explicit in qwen3 (may differ from hidden / heads); else hidden / heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeArgs rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o for llama) biases; qwen2 always has q/k/v biases
  bool mlp_bias = false;
  bool qk_norm = false;  // qwen3: RMSNorm over head_dim on q and k before RoPE
  std::string dtype = "float32";  // torch_dtype / dtype of the checkpoint
  // The config.json text this came from, written back unchanged by save_hf so a round trip keeps every field.
  std::string raw_config_json;
};

// Reads `dir`/config.json (a regular file only: a FIFO is refused, never waited on). Unknown model_type, a missing
// or mistyped field, a size past its limit, rope_theta <= 0, rms_norm_eps < 0, NaN or infinity, heads that do not
// divide, a dtype other than float32 / bfloat16 / float16: EngineryError naming the file, the field and what is
// allowed, never another exception type.
ModelArgs read_hf_config(const std::string& dir);
// The same from config.json's text (any bytes); `where` names the file in errors. The entry point for fuzzing.
ModelArgs parse_hf_config(const std::string& json_text, const std::string& where);

// The number of parameters a model of `args` has (as a double: it only sizes messages and estimates).
double approx_parameter_count(const ModelArgs& args);

// config.json text (transformers 5 form) for args that did not come from a file.
std::string hf_config_json(const ModelArgs& args);

// Built-in tiny configs: "qwen2-tiny", "llama-tiny", "qwen3-tiny" (name without the "builtin:" prefix).
ModelArgs builtin_args(const std::string& name);
std::string builtin_names();  // comma-separated, for error messages

}  // namespace models
}  // namespace enginery
