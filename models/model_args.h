#pragma once
// The architecture of a decoder LM as read from a Hugging Face config.json (llama, qwen2, qwen3, qwen3_moe) or taken
// from a built-in tiny config. Both config.json forms found in the wild are read: the long-standing one (rope_theta,
// rope_scaling, torch_dtype) and the transformers 5 one (rope_parameters, dtype).
#include <cstdint>
#include <string>
#include <vector>

#include "host_api/config.h"

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

// qwen3_moe's sparse MLP layers (models/moe.h; docs/ARCHITECTURE.md, "Mixture of experts"), transformers'
// Qwen3MoeConfig fields of the same names.
struct MoeArgs {
  int64_t num_experts = 0;  // 0: every layer dense (and every other field unused)
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;  // the top-k routing weights renormalised to sum to 1
  int64_t decoder_sparse_step = 1;  // layer i is sparse when (i + 1) % step == 0 and i is not in mlp_only_layers
  std::vector<int64_t> mlp_only_layers;
  // The load-balancing loss's weight in transformers' own loss (with labels and output_router_logits); read and
  // written back, never added to enginery's training loss (models/moe.h says why).
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;
};

struct ModelArgs {
  std::string model_type;  // "llama" | "qwen2" | "qwen3" | "qwen3_moe"
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
  bool qk_norm = false;  // qwen3, qwen3_moe: RMSNorm over head_dim on q and k before RoPE
  MoeArgs moe;           // qwen3_moe only
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

// Whether decoder layer `layer` (0-based) of `args` is a sparse mixture-of-experts layer, as transformers decides.
bool is_moe_layer(const ModelArgs& args, int64_t layer);

// Built-in tiny configs: "qwen2-tiny", "llama-tiny", "qwen3-tiny", "qwen3-moe-tiny" (name without the "builtin:"
// prefix).
ModelArgs builtin_args(const std::string& name);
std::string builtin_names();  // comma-separated, for error messages

// The args of model.path as ModelConfig::source() resolved it: the built-in's, or the directory's config.json.
ModelArgs args_of(const ModelSource& source);

}  // namespace models
}  // namespace enginery
