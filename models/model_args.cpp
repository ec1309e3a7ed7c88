#include "models/model_args.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "host_api/error.h"
#include "support/input_files.h"

namespace enginery {
namespace models {
namespace {

using nlohmann::json;

const char* kAllowedModelTypes = "llama, qwen2, qwen3, qwen3_moe";
const char* kConfigDtypes = "float32, bfloat16, float16";
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;

// Limits far beyond any released model of these families. A value past them is a mistake, and refusing it while
// parsing keeps it from ever reaching an allocation (docs/ARCHITECTURE.md, "Errors"): no bare std::bad_alloc.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxHidden = int64_t{1} << 18;
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxHeads = int64_t{1} << 12;
constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
constexpr int64_t kMaxPositions = int64_t{1} << 30;
constexpr int64_t kMaxExperts = int64_t{1} << 16;

std::string int_range(int64_t lo, int64_t hi) {
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

struct Reader {
  const json& j;
  std::string where;

  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }

  // An integer field in [lo, hi]; a float, a string or a value out of range names the key and the range.
  int64_t int_in(const char* key, int64_t lo, int64_t hi) const {
    if (!has(key)) throw EngineryError(std::string("missing field '") + key + "'", where + ": " + key);
    const json& v = j.at(key);
    if (!v.is_number_integer()) {
      throw EngineryError(std::string("field '") + key + "' must be an integer", where + ": " + key, int_range(lo, hi));
    }
    const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
    if (huge || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      const std::string shown =
          v.is_number_unsigned() ? std::to_string(v.get<uint64_t>()) : std::to_string(v.get<int64_t>());
      throw EngineryError(std::string("field '") + key + "' is " + shown + ", out of range", where + ": " + key,
                          int_range(lo, hi));
    }
    return v.get<int64_t>();
  }
  int64_t int_in(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    return has(key) ? int_in(key, lo, hi) : fallback;
  }

  double num_field(const json& obj, const char* key, const std::string& at) const {
    if (!obj.contains(key) || obj.at(key).is_null()) {
      throw EngineryError(std::string("missing field '") + key + "'", where + ": " + at + key);
    }
    if (!obj.at(key).is_number()) {
      throw EngineryError(std::string("field '") + key + "' must be a number", where + ": " + at + key);
    }
    return obj.at(key).get<double>();
  }
  double num_field(const char* key, double fallback) const { return has(key) ? num_field(j, key, "") : fallback; }

  // `value` (field `field`) in [lo, hi], or in (lo, hi] with open_lo; NaN and infinities never pass.
  void check_range(double value, const std::string& field, double lo, double hi, bool open_lo) const {
    const bool ok = std::isfinite(value) && (open_lo ? value > lo : value >= lo) && value <= hi;
    if (ok) return;
    std::ostringstream shown, allowed;
    shown << value;
    allowed << "a finite number in " << (open_lo ? "(" : "[") << lo << ", " << hi << "]";
    throw EngineryError("field '" + field + "' is " + shown.str() + ", out of range", where + ": " + field,
                        allowed.str());
  }

  bool bool_field(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j.at(key).is_boolean()) throw EngineryError(std::string("field '") + key + "' must be true or false", where + ": " + key);
    return j.at(key).get<bool>();
  }
  std::string str_field(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j.at(key).is_string()) throw EngineryError(std::string("field '") + key + "' must be a string", where + ": " + key);
    return j.at(key).get<std::string>();
  }
};

constexpr double kHuge = std::numeric_limits<double>::max();

// The scaling fields of a rope type other than "default", each checked: a zero or negative factor, or equal
// frequency factors (llama3 divides by their difference), would make every position's angle NaN or infinite.
void read_rope_scaling(const Reader& r, const json& params, const std::string& field, RopeArgs& rope) {
  const std::string at = field + ".";
  rope.factor = r.num_field(params, "factor", at);
  r.check_range(rope.factor, at + "factor", 0.0, kHuge, true);
  if (rope.type == "linear") return;
  rope.low_freq_factor = r.num_field(params, "low_freq_factor", at);
  rope.high_freq_factor = r.num_field(params, "high_freq_factor", at);
  r.check_range(rope.low_freq_factor, at + "low_freq_factor", 0.0, kHuge, true);
  r.check_range(rope.high_freq_factor, at + "high_freq_factor", rope.low_freq_factor, kHuge, true);
  const double original = r.num_field(params, "original_max_position_embeddings", at);
  r.check_range(original, at + "original_max_position_embeddings", 1.0, static_cast<double>(kMaxPositions), false);
  if (original != std::floor(original)) {
    throw EngineryError("field 'original_max_position_embeddings' must be an integer",
                        r.where + ": " + at + "original_max_position_embeddings");
  }
  rope.original_max_position_embeddings = static_cast<int64_t>(original);
}

// rope_parameters (transformers 5) or rope_scaling (long-standing): {rope_type|type, factor, ...}.
RopeArgs read_rope(const Reader& r) {
  RopeArgs rope;
  rope.theta = r.num_field("rope_theta", 10000.0);
  const json* params = nullptr;
  std::string field = "rope_theta";
  if (r.has("rope_parameters")) {
    params = &r.j.at("rope_parameters");
    field = "rope_parameters";
    // Models with several attention types nest one set per type; these models only have full attention.
    if (params->is_object() && !params->contains("rope_type") && !params->contains("type") &&
        params->contains("full_attention")) {
      params = &params->at("full_attention");
      field += ".full_attention";
    }
  } else if (r.has("rope_scaling")) {
    params = &r.j.at("rope_scaling");
    field = "rope_scaling";
  }
  if (params != nullptr) {
    if (!params->is_object()) throw EngineryError("field '" + field + "' must be an object", r.where + ": " + field);
    if (params->contains("rope_theta")) rope.theta = r.num_field(*params, "rope_theta", field + ".");
    const char* type_key = params->contains("rope_type") ? "rope_type" : params->contains("type") ? "type" : nullptr;
    if (type_key != nullptr) {
      if (!params->at(type_key).is_string()) {
        const std::string key = field + "." + type_key;
        throw EngineryError("field '" + key + "' must be a string", r.where + ": " + key);
      }
      rope.type = params->at(type_key).get<std::string>();
    }
  }
  const bool nested_theta = params != nullptr && params->contains("rope_theta");
  const std::string theta_field = nested_theta ? field + ".rope_theta" : "rope_theta";
  r.check_range(rope.theta, theta_field, 0.0, kHuge, true);
  if (rope.type == "default") return rope;
  if (rope.type == "linear" || rope.type == "llama3") {
    read_rope_scaling(r, *params, field, rope);
    return rope;
  }
  throw EngineryError("unsupported rope type '" + rope.type + "'", r.where + ": " + field + ".rope_type",
                      "default, linear, llama3");
}

// The sizes, each within its limit and consistent with the others (heads divide, head_dim even).
void read_sizes(const Reader& r, ModelArgs& a) {
  a.vocab_size = r.int_in("vocab_size", 1, kMaxVocab);
  a.hidden_size = r.int_in("hidden_size", 1, kMaxHidden);
  a.intermediate_size = r.int_in("intermediate_size", 1, kMaxIntermediate);
  a.num_hidden_layers = r.int_in("num_hidden_layers", 1, kMaxLayers);
  a.num_attention_heads = r.int_in("num_attention_heads", 1, kMaxHeads);
  a.num_key_value_heads = r.int_in("num_key_value_heads", a.num_attention_heads, 1, a.num_attention_heads);
  if (a.num_attention_heads % a.num_key_value_heads != 0) {
    throw EngineryError("num_attention_heads must be a multiple of num_key_value_heads",
                        r.where + ": num_key_value_heads",
                        "a divisor of num_attention_heads (" + std::to_string(a.num_attention_heads) + ")");
  }
  // transformers: llama/qwen2/qwen3_moe use hidden/heads unless head_dim is given; Qwen3Config defaults it to 128.
  if (r.has("head_dim")) {
    a.head_dim = r.int_in("head_dim", 2, kMaxHeadDim);
  } else if (a.model_type == "qwen3") {
    a.head_dim = 128;
  } else if (a.hidden_size % a.num_attention_heads != 0) {
    throw EngineryError("hidden_size " + std::to_string(a.hidden_size) + " is not a multiple of num_attention_heads " +
                            std::to_string(a.num_attention_heads) + " and no head_dim is given",
                        r.where + ": hidden_size", "a multiple of num_attention_heads, or an explicit head_dim");
  } else {
    a.head_dim = a.hidden_size / a.num_attention_heads;
  }
  if (a.head_dim % 2 != 0) {
    throw EngineryError("head_dim must be even (RoPE rotates pairs)", r.where + ": head_dim", "an even head_dim");
  }
  a.max_position_embeddings = r.int_in("max_position_embeddings", 2048, 1, kMaxPositions);
}

// Qwen3MoeConfig's fields, with its defaults. Each changes the math, so each is checked: a top-k larger than the
// experts, or an mlp_only_layers entry that names no layer, is refused by name.
MoeArgs read_moe(const Reader& r, int64_t layers) {
  MoeArgs m;
  // Qwen's checkpoints say num_experts; transformers 5 writes the same field as num_local_experts (its
  // attribute_map). Either is read; both present must agree.
  m.num_experts = r.int_in("num_experts", 128, 0, kMaxExperts);
  if (r.has("num_local_experts")) {
    const int64_t local = r.int_in("num_local_experts", 0, kMaxExperts);
    if (r.has("num_experts") && local != m.num_experts) {
      throw EngineryError("num_local_experts (" + std::to_string(local) + ") and num_experts (" +
                              std::to_string(m.num_experts) + ") disagree",
                          r.where + ": num_local_experts", "the same number of experts in both fields");
    }
    m.num_experts = local;
  }
  if (m.num_experts == 0) return m;
  // transformers' default of 8 applies whatever num_experts is: with fewer experts its top-k fails, so it is refused.
  m.num_experts_per_tok = r.int_in("num_experts_per_tok", 8, 1, kMaxExperts);
  if (m.num_experts_per_tok > m.num_experts) {
    throw EngineryError("num_experts_per_tok (" + std::to_string(m.num_experts_per_tok) + ", " +
                            (r.has("num_experts_per_tok") ? "given" : "transformers' default") +
                            ") is more than the " + std::to_string(m.num_experts) + " experts",
                        r.where + ": num_experts_per_tok", int_range(1, m.num_experts));
  }
  m.moe_intermediate_size = r.int_in("moe_intermediate_size", 768, 1, kMaxIntermediate);
  m.norm_topk_prob = r.bool_field("norm_topk_prob", false);
  m.decoder_sparse_step = r.int_in("decoder_sparse_step", 1, 1, kMaxLayers);
  // An index that names no layer changes nothing in transformers, so it loads here too (a config cut to fewer
  // layers keeps its list); anything but a list of integers is refused.
  if (r.has("mlp_only_layers")) {
    const json& list = r.j.at("mlp_only_layers");
    const std::string allowed = "a list of layer indices (those in " + int_range(0, layers - 1) + " are dense)";
    if (!list.is_array()) throw EngineryError("field 'mlp_only_layers' must be a list", r.where + ": mlp_only_layers", allowed);
    for (const json& v : list) {
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMaxLayers))) {
        throw EngineryError("field 'mlp_only_layers' holds " + v.dump() + ", not a layer index",
                            r.where + ": mlp_only_layers", allowed);
      }
      m.mlp_only_layers.push_back(v.get<int64_t>());
    }
  }
  m.router_aux_loss_coef = r.num_field("router_aux_loss_coef", 0.001);
  r.check_range(m.router_aux_loss_coef, "router_aux_loss_coef", 0.0, kHuge, false);
  m.output_router_logits = r.bool_field("output_router_logits", false);
  return m;
}

ModelArgs args_from_json(const json& j, const std::string& where) {
  if (!j.is_object()) throw EngineryError("config must be a JSON object", where);
  Reader r{j, where};
  ModelArgs a;
  if (!r.has("model_type")) throw EngineryError("missing field 'model_type'", where + ": model_type", kAllowedModelTypes);
  a.model_type = r.str_field("model_type", "");
  if (a.model_type != "llama" && a.model_type != "qwen2" && a.model_type != "qwen3" && a.model_type != "qwen3_moe") {
    throw EngineryError("unknown model_type '" + a.model_type + "'", where + ": model_type", kAllowedModelTypes);
  }
  read_sizes(r, a);
  a.rms_norm_eps = r.num_field("rms_norm_eps", 1e-6);
  r.check_range(a.rms_norm_eps, "rms_norm_eps", 0.0, 1.0, false);
  a.rope = read_rope(r);
  a.tie_word_embeddings = r.bool_field("tie_word_embeddings", false);
  a.attention_bias = a.model_type == "qwen2" ? true : r.bool_field("attention_bias", false);
  a.mlp_bias = a.model_type == "llama" ? r.bool_field("mlp_bias", false) : false;
  a.qk_norm = a.model_type == "qwen3" || a.model_type == "qwen3_moe";
  if (a.model_type == "qwen3_moe") a.moe = read_moe(r, a.num_hidden_layers);
  // The weights' dtype, also the one save_hf writes: refused here rather than at the first save.
  const char* dtype_key = r.has("dtype") ? "dtype" : "torch_dtype";
  a.dtype = r.str_field(dtype_key, "float32");
  if (a.dtype != "float32" && a.dtype != "bfloat16" && a.dtype != "float16") {
    throw EngineryError("unsupported " + std::string(dtype_key) + " '" + a.dtype + "'", where + ": " + dtype_key,
                        kConfigDtypes);
  }
  const std::string act = r.str_field("hidden_act", "silu");
  if (act != "silu") throw EngineryError("unsupported hidden_act '" + act + "'", where + ": hidden_act", "silu");
  if (r.bool_field("use_sliding_window", false)) {
    throw EngineryError("sliding-window attention is not supported", where + ": use_sliding_window", "false");
  }
  return a;
}

}  // namespace

ModelArgs parse_hf_config(const std::string& json_text, const std::string& where) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw EngineryError(std::string("not valid JSON: ") + e.what(), where);
  }
  try {
    ModelArgs a = args_from_json(j, where);
    a.raw_config_json = json_text;
    return a;
  } catch (const json::exception& e) {  // the checks leave none; a last line against a crash
    throw EngineryError(std::string("malformed config: ") + e.what(), where);
  }
}

ModelArgs read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  return parse_hf_config(input::read_regular(path, kMaxConfigBytes, "cannot open the model's config.json"), path);
}

bool is_moe_layer(const ModelArgs& a, int64_t layer) {
  const MoeArgs& m = a.moe;
  if (m.num_experts == 0 || (layer + 1) % m.decoder_sparse_step != 0) return false;
  return std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), layer) == m.mlp_only_layers.end();
}

double approx_parameter_count(const ModelArgs& a) {
  const double hidden = static_cast<double>(a.hidden_size), head_dim = static_cast<double>(a.head_dim);
  const double heads = static_cast<double>(2 * a.num_attention_heads + 2 * a.num_key_value_heads);  // q, o; k, v
  const double attention = hidden * head_dim * heads;
  const double mlp = 3.0 * hidden * static_cast<double>(a.intermediate_size);
  const double experts = static_cast<double>(a.moe.num_experts) *
                             (3.0 * hidden * static_cast<double>(a.moe.moe_intermediate_size)) +
                         hidden * static_cast<double>(a.moe.num_experts);  // the experts and the router
  double layers = 0.0;
  for (int64_t i = 0; i < a.num_hidden_layers; ++i) layers += attention + (is_moe_layer(a, i) ? experts : mlp);
  const double embeddings = static_cast<double>(a.vocab_size) * hidden * (a.tie_word_embeddings ? 1.0 : 2.0);
  return embeddings + layers;
}

std::string hf_config_json(const ModelArgs& a) {
  const char* arch = a.model_type == "llama"       ? "LlamaForCausalLM"
                     : a.model_type == "qwen2"     ? "Qwen2ForCausalLM"
                     : a.model_type == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                                                   : "Qwen3ForCausalLM";
  json rope = {{"rope_type", a.rope.type}, {"rope_theta", a.rope.theta}};
  if (a.rope.type != "default") rope["factor"] = a.rope.factor;
  if (a.rope.type == "llama3") {
    rope["low_freq_factor"] = a.rope.low_freq_factor;
    rope["high_freq_factor"] = a.rope.high_freq_factor;
    rope["original_max_position_embeddings"] = a.rope.original_max_position_embeddings;
  }
  json j = {{"architectures", {arch}},
            {"model_type", a.model_type},
            {"vocab_size", a.vocab_size},
            {"hidden_size", a.hidden_size},
            {"intermediate_size", a.intermediate_size},
            {"num_hidden_layers", a.num_hidden_layers},
            {"num_attention_heads", a.num_attention_heads},
            {"num_key_value_heads", a.num_key_value_heads},
            {"head_dim", a.head_dim},
            {"max_position_embeddings", a.max_position_embeddings},
            {"rms_norm_eps", a.rms_norm_eps},
            {"rope_parameters", rope},
            {"tie_word_embeddings", a.tie_word_embeddings},
            {"hidden_act", "silu"},
            {"dtype", a.dtype}};
  if (a.model_type != "qwen2") j["attention_bias"] = a.attention_bias;
  if (a.model_type == "llama") j["mlp_bias"] = a.mlp_bias;
  if (a.model_type == "qwen3_moe") {
    j["num_experts"] = a.moe.num_experts;
    j["num_experts_per_tok"] = a.moe.num_experts_per_tok;
    j["moe_intermediate_size"] = a.moe.moe_intermediate_size;
    j["norm_topk_prob"] = a.moe.norm_topk_prob;
    j["decoder_sparse_step"] = a.moe.decoder_sparse_step;
    j["mlp_only_layers"] = a.moe.mlp_only_layers;
    j["router_aux_loss_coef"] = a.moe.router_aux_loss_coef;
    j["output_router_logits"] = a.moe.output_router_logits;
  }
  return j.dump(2) + "\n";
}

ModelArgs builtin_args(const std::string& name) {
  ModelArgs a;
  a.vocab_size = 256;
  a.hidden_size = 64;
  a.intermediate_size = 192;
  a.num_hidden_layers = 4;
  a.num_attention_heads = 4;
  a.num_key_value_heads = 2;
  a.head_dim = 16;
  a.max_position_embeddings = 2048;
  a.rms_norm_eps = 1e-6;
  if (name == "qwen2-tiny") {
    a.model_type = "qwen2";
    a.rope.theta = 1000000.0;
    a.tie_word_embeddings = true;
    a.attention_bias = true;
  } else if (name == "llama-tiny") {
    a.model_type = "llama";
    a.rms_norm_eps = 1e-5;
    a.rope.type = "llama3";
    a.rope.theta = 500000.0;
    a.rope.factor = 8.0;
    a.rope.low_freq_factor = 1.0;
    a.rope.high_freq_factor = 4.0;
    a.rope.original_max_position_embeddings = 64;
  } else if (name == "qwen3-tiny") {
    a.model_type = "qwen3";
    a.head_dim = 32;  // != hidden / heads, as in the Qwen3 family
    a.qk_norm = true;
    a.rope.theta = 1000000.0;
  } else if (name == "qwen3-moe-tiny") {
    // Qwen3-30B-A3B's routing (8 of 128 experts, renormalised) scaled down: 8 experts, 2 per token, every layer
    // sparse but the last (mlp_only_layers), so both kinds of MLP are in every test that uses it.
    a.model_type = "qwen3_moe";
    a.head_dim = 32;
    a.qk_norm = true;
    a.rope.theta = 1000000.0;
    a.moe.num_experts = 8;
    a.moe.num_experts_per_tok = 2;
    a.moe.moe_intermediate_size = 32;
    a.moe.norm_topk_prob = true;
    a.moe.mlp_only_layers = {a.num_hidden_layers - 1};
  } else {
    throw EngineryError("unknown built-in model 'builtin:" + name + "'", "model.path", builtin_names());
  }
  a.raw_config_json = hf_config_json(a);
  return a;
}

ModelArgs args_of(const ModelSource& source) {
  return source.is_builtin() ? builtin_args(source.name) : read_hf_config(source.name);
}

std::string builtin_names() {
  return "builtin:qwen2-tiny, builtin:llama-tiny, builtin:qwen3-tiny, builtin:qwen3-moe-tiny";
}

}  // namespace models
}  // namespace enginery
