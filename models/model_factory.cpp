#include "models/model_factory.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include "host_api/error.h"
#include "engine_driver/precision.h"
#include "models/causal_lm.h"
#include "models/safetensors.h"

namespace enginery {
namespace models {
namespace {

namespace fs = std::filesystem;


c10::ScalarType checkpoint_dtype(const std::string& name, const std::string& where) {
  if (name == "float32") return c10::kFloat;
  if (name == "bfloat16") return c10::kBFloat16;
  if (name == "float16") return c10::kHalf;
  throw EngineryError("unsupported dtype '" + name + "'", where, "float32, bfloat16, float16");
}

// transformers' _init_weights: normal(0, 0.02) for linear and embedding weights, zero biases, unit norms.
void init_weights(torch::nn::Module& model, int64_t seed, const std::string& only_prefix = "") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) {
    const std::string& name = p.key();
    if (!only_prefix.empty() && name.rfind(only_prefix, 0) != 0) continue;
    auto& t = p.value();
    if (name.find("norm") != std::string::npos) {
      t.fill_(1.0);
    } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      t.zero_();
    } else {
      auto v = torch::empty(t.sizes(), torch::kFloat);
      v.normal_(0.0, 0.02, gen);
      t.copy_(v);
    }
  }
}

void load_weights(CausalLM& model, const std::string& dir, int64_t seed) {
  auto tensors = read_safetensors_dir(dir);
  std::map<std::string, torch::Tensor> by_name(tensors.begin(), tensors.end());
  const bool value = model.head_kind() == HeadKind::kValue;
  torch::NoGradGuard no_grad;
  bool init_score = false;
  for (auto& p : model.named_parameters()) {
    auto it = by_name.find(p.key());
    if (it == by_name.end()) {
      if (value && p.key().rfind("score.", 0) == 0) {
        init_score = true;  // a language-model checkpoint becomes a critic: fresh value head
        continue;
      }
      throw EngineryError("checkpoint lacks tensor '" + p.key() + "'", dir);
    }
    if (it->second.sizes() != p.value().sizes()) {
      std::ostringstream msg;
      msg << "tensor '" << p.key() << "' has shape " << it->second.sizes() << " in the checkpoint but the config gives "
          << p.value().sizes();
      throw EngineryError(msg.str(), dir);
    }
    p.value().copy_(it->second);
    by_name.erase(it);
  }
  if (init_score) init_weights(model, seed, "score.");
  // lm_head.weight may sit beside tied embeddings, and a value model ignores the LM head.
  by_name.erase("lm_head.weight");
  if (!value) {
    by_name.erase("score.weight");
    by_name.erase("score.bias");
  }
  if (!by_name.empty()) {
    throw EngineryError("checkpoint tensor '" + by_name.begin()->first + "' has no place in a " +
                            model.args().model_type + " model of this config",
                        dir);
  }
}

}  // namespace

std::shared_ptr<DecoderModel> build_model(const ModelConfig& cfg, const std::string& model_type,
                                          const BuildOptions& options) {
  HeadKind head;
  if (model_type == "language_model") {
    head = HeadKind::kLanguageModel;
  } else if (model_type == "value_model") {
    head = HeadKind::kValue;
  } else {
    throw EngineryError("unknown model type '" + model_type + "'", "model_type", "language_model, value_model");
  }
  const ModelSource source = cfg.source();
  ModelArgs args = args_of(source);
  const std::string config_where = source.is_builtin() ? "builtin:" + source.name : source.name + "/config.json";
  std::shared_ptr<CausalLM> model;
  // Sizes within the parser's limits can still exceed this machine's memory: say so naming the config, instead
  // of a bare std::bad_alloc or an allocator message without a file.
  auto out_of_memory = [&](const std::string& detail) {
    const double gb = approx_parameter_count(args) * 4.0 / 1e9;
    return EngineryError("not enough memory for the model it describes (about " + std::to_string(gb) +
                             " GB of float32 parameters)" + detail,
                         config_where);
  };
  try {
    model = std::make_shared<CausalLM>(args, head);
  } catch (const std::bad_alloc&) {
    throw out_of_memory("");
  } catch (const c10::Error& e) {
    throw out_of_memory(std::string(": ") + e.what_without_backtrace());
  }
  if (source.is_builtin()) {
    init_weights(*model, options.seed);
  } else {
    load_weights(*model, source.name, options.seed);
  }
  model->to(options.device, cfg.override_dtype.value_or(c10::kFloat));
  model->set_gradient_checkpointing(cfg.enable_gradient_checkpointing);
  return model;
}

void save_hf(DecoderModel& model, const std::string& dir, int64_t max_shard_bytes) {
  NamedTensors weights;
  for (auto& p : model.named_parameters()) weights.emplace_back(p.key(), p.value().detach());
  save_hf(model, dir, weights, max_shard_bytes);
}

void save_hf(DecoderModel& model, const std::string& dir, const NamedTensors& weights, int64_t max_shard_bytes) {
  auto* lm = dynamic_cast<CausalLM*>(&model);
  if (lm == nullptr) throw EngineryError("save_hf needs a model built by build_model", dir);
  const auto dtype = checkpoint_dtype(lm->args().dtype, "config.json: dtype");
  std::map<std::string, torch::Tensor> by_name(weights.begin(), weights.end());
  NamedTensors tensors;
  for (auto& p : lm->named_parameters()) {
    auto it = by_name.find(p.key());
    if (it == by_name.end()) throw EngineryError("no weights given for parameter '" + p.key() + "'", dir);
    tensors.emplace_back(p.key(), it->second.detach().to(torch::kCPU, dtype));
  }
  fs::create_directories(dir);
  write_safetensors_dir(dir, tensors, max_shard_bytes);
  std::string config = lm->args().raw_config_json;
  if (lm->head_kind() == HeadKind::kValue) {
    // Name the token-classification class so transformers loads the value head (score) too.
    auto j = nlohmann::json::parse(config);
    const std::string& t = lm->args().model_type;
    const std::string arch = t == "llama"       ? "LlamaForTokenClassification"
                             : t == "qwen2"     ? "Qwen2ForTokenClassification"
                             : t == "qwen3_moe" ? "Qwen3MoeForTokenClassification"
                                                : "Qwen3ForTokenClassification";
    j["architectures"] = {arch};
    j["id2label"] = {{"0", "LABEL_0"}};
    j["label2id"] = {{"LABEL_0", 0}};
    config = j.dump(2) + "\n";
  }
  std::ofstream out(fs::path(dir) / "config.json", std::ios::trunc);
  out << config;
  if (!out) throw EngineryError("cannot write config.json", dir);
}

}  // namespace models
}  // namespace enginery
