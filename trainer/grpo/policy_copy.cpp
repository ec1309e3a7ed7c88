#include "trainer/grpo/policy_copy.h"

#include <set>

#include "host_api/error.h"
#include "host_api/exports.h"
#include "models/model_factory.h"
#include "engine_driver/weight_export.h"

namespace enginery {
namespace grpo {

PolicyCopy::PolicyCopy(const TrainConfig& config, const torch::Device& device, c10::ScalarType dtype,
                       const std::string& role)
    : dtype_(dtype), role_(role) {
  ModelConfig cfg = config.model;
  cfg.override_dtype = dtype;
  cfg.enable_gradient_checkpointing = false;  // never trained
  models::BuildOptions options;
  options.device = device;
  options.seed = config.engine.seed;
  model_ = std::dynamic_pointer_cast<models::CausalLM>(models::build_model(cfg, "language_model", options));
  if (!model_) throw EngineryError("the " + role_ + " model is not a CausalLM", config.where("model.path"));
  model_->eval();
  for (auto& p : model_->parameters()) p.set_requires_grad(false);
}

void PolicyCopy::load_from(BaseEngine& engine) {
  torch::NoGradGuard no_grad;
  auto params = model_->named_parameters(/*recurse=*/true);
  std::set<std::string> loaded;
  std::string problem;  // the first one; reported after the stream is drained so no rank leaves it early
  std::unique_ptr<WeightStream> stream = engine.export_weights(dtype_);
  for (auto group = stream->next(); !group.empty(); group = stream->next()) {
    for (const NamedTensor& item : group) {
      torch::Tensor* target = params.find(item.name);
      if (target == nullptr) {
        // A tied head has no lm_head.weight of its own; an engine may still name it.
        if (!(model_->tied_embeddings() && item.name == "lm_head.weight") && problem.empty()) {
          problem = "the actor streamed '" + item.name + "', which the " + role_ + " model does not have";
        }
        continue;
      }
      if (!target->sizes().equals(item.tensor.sizes())) {
        if (problem.empty()) problem = "'" + item.name + "' has another shape in the actor";
        continue;
      }
      target->copy_(item.tensor);
      loaded.insert(item.name);
    }
  }
  for (const auto& p : params) {
    if (problem.empty() && !loaded.count(p.key())) problem = "the actor streamed no '" + p.key() + "'";
  }
  if (!problem.empty()) {
    throw EngineryError(problem, "grpo: loading the " + role_ + " model from the actor's weight stream",
                        "the same model config for actor and " + role_);
  }
}

torch::Tensor PolicyCopy::log_probs(const Batch& batch, int64_t rows_per_call) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const Batch& part : batch.split(rows_per_call)) {
    models::ModelInputs inputs;
    inputs.input_ids = part.at("input_ids");
    inputs.attention_mask = part.at("attention_mask");
    models::HeadOptions head;
    head.temperature = batch_temperature(part);
    const ModelOutput out = model_->forward(inputs, head, nullptr);
    parts.push_back(out.log_probs.to(torch::kFloat));
  }
  return torch::cat(parts, 0);
}

}  // namespace grpo
}  // namespace enginery
