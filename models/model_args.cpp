#include "models/model_args.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "host_api/error.h"

namespace enginery {
namespace models {
namespace {

using nlohmann::json;

const char* kAllowedModelTypes = "llama, qwen2, qwen3";

struct Reader {
  const json& j;
  std::string where;

  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }

  int64_t int_field(const char* key) const {
    if (!has(key)) throw EngineryError(std::string("missing field '") + key + "'", where + ": " + key);
    const json& v = j.at(key);
    if (!v.is_number_integer()) throw EngineryError(std::string("field '") + key + "' must be an integer", where + ": " + key);
    return v.get<int64_t>();
  }
  int64_t int_field(const char* key, int64_t fallback) const { return has(key) ? int_field(key) : fallback; }

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

// rope_parameters (transformers 5) or rope_scaling (long-standing): {rope_type|type, factor, ...}.
RopeArgs read_rope(const Reader& r) {
  RopeArgs rope;
  rope.theta = r.num_field("rope_theta", 10000.0);
  const json* params = nullptr;
  std::string field;
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
  if (params == nullptr) return rope;
  if (!params->is_object()) throw EngineryError("field '" + field + "' must be an object", r.where + ": " + field);
  if (params->contains("rope_theta")) rope.theta = r.num_field(*params, "rope_theta", field + ".");
  if (params->contains("rope_type")) {
    rope.type = params->at("rope_type").get<std::string>();
  } else if (params->contains("type")) {
    rope.type = params->at("type").get<std::string>();
  }
  const std::string at = field + ".";
  if (rope.type == "default") return rope;
  if (rope.type == "linear") {
    rope.factor = r.num_field(*params, "factor", at);
    return rope;
  }
  if (rope.type == "llama3") {
    rope.factor = r.num_field(*params, "factor", at);
    rope.low_freq_factor = r.num_field(*params, "low_freq_factor", at);
    rope.high_freq_factor = r.num_field(*params, "high_freq_factor", at);
    rope.original_max_position_embeddings =
        static_cast<int64_t>(r.num_field(*params, "original_max_position_embeddings", at));
    return rope;
  }
  throw EngineryError("unsupported rope type '" + rope.type + "'", r.where + ": " + field + ".rope_type",
                      "default, linear, llama3");
}

}  // namespace

ModelArgs parse_hf_config(const std::string& json_text, const std::string& where) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw EngineryError(std::string("not valid JSON: ") + e.what(), where);
  }
  if (!j.is_object()) throw EngineryError("config must be a JSON object", where);
  Reader r{j, where};
  ModelArgs a;
  if (!r.has("model_type")) throw EngineryError("missing field 'model_type'", where + ": model_type", kAllowedModelTypes);
  a.model_type = r.str_field("model_type", "");
  if (a.model_type != "llama" && a.model_type != "qwen2" && a.model_type != "qwen3") {
    throw EngineryError("unknown model_type '" + a.model_type + "'", where + ": model_type", kAllowedModelTypes);
  }
  a.vocab_size = r.int_field("vocab_size");
  a.hidden_size = r.int_field("hidden_size");
  a.intermediate_size = r.int_field("intermediate_size");
  a.num_hidden_layers = r.int_field("num_hidden_layers");
  a.num_attention_heads = r.int_field("num_attention_heads");
  a.num_key_value_heads = r.int_field("num_key_value_heads", a.num_attention_heads);
  // transformers: llama/qwen2 use hidden/heads unless head_dim is given; Qwen3Config defaults head_dim to 128.
  const int64_t default_head_dim = a.model_type == "qwen3" ? 128 : a.hidden_size / std::max<int64_t>(1, a.num_attention_heads);
  a.head_dim = r.int_field("head_dim", default_head_dim);
  a.max_position_embeddings = r.int_field("max_position_embeddings", 2048);
  a.rms_norm_eps = r.num_field("rms_norm_eps", 1e-6);
  a.rope = read_rope(r);
  a.tie_word_embeddings = r.bool_field("tie_word_embeddings", false);
  a.attention_bias = a.model_type == "qwen2" ? true : r.bool_field("attention_bias", false);
  a.mlp_bias = a.model_type == "llama" ? r.bool_field("mlp_bias", false) : false;
  a.qk_norm = a.model_type == "qwen3";
  a.dtype = r.str_field("dtype", r.str_field("torch_dtype", "float32"));
  const std::string act = r.str_field("hidden_act", "silu");
  if (act != "silu") throw EngineryError("unsupported hidden_act '" + act + "'", where + ": hidden_act", "silu");
  if (r.bool_field("use_sliding_window", false)) {
    throw EngineryError("sliding-window attention is not supported", where + ": use_sliding_window", "false");
  }
  for (auto [name, value] : {std::pair<const char*, int64_t>{"vocab_size", a.vocab_size},
                             {"hidden_size", a.hidden_size},
                             {"intermediate_size", a.intermediate_size},
                             {"num_hidden_layers", a.num_hidden_layers},
                             {"num_attention_heads", a.num_attention_heads},
                             {"num_key_value_heads", a.num_key_value_heads},
                             {"head_dim", a.head_dim}}) {
    if (value <= 0) throw EngineryError(std::string("field '") + name + "' must be positive", where + ": " + name);
  }
  if (a.num_attention_heads % a.num_key_value_heads != 0) {
    throw EngineryError("num_attention_heads must be a multiple of num_key_value_heads",
                        where + ": num_key_value_heads");
  }
  if (a.head_dim % 2 != 0) throw EngineryError("head_dim must be even (RoPE rotates pairs)", where + ": head_dim");
  a.raw_config_json = json_text;
  return a;
}

ModelArgs read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw EngineryError("cannot open the model's config.json", path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_hf_config(text.str(), path);
}

std::string hf_config_json(const ModelArgs& a) {
  const char* arch = a.model_type == "llama" ? "LlamaForCausalLM"
                     : a.model_type == "qwen2" ? "Qwen2ForCausalLM"
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
  } else {
    throw EngineryError("unknown built-in model 'builtin:" + name + "'", "model.path", builtin_names());
  }
  a.raw_config_json = hf_config_json(a);
  return a;
}

std::string builtin_names() { return "builtin:qwen2-tiny, builtin:llama-tiny, builtin:qwen3-tiny"; }

}  // namespace models
}  // namespace enginery
