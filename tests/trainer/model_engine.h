#pragma once
// A one-rank engine in the test process around a plain models::CausalLM, for tests of what the trainer does with an
// engine (GRPO's step, the evaluator) without a plugin or a second process. Its head honours batch_temperature() as
// the fsdp plugin's does; optimizer_step reports the global grad norm and leaves the weights as they are, so a test
// can compute its reference from the same starting weights. Every call is recorded for the test to read back.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "host_api/base_engine.h"
#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/model_factory.h"

namespace enginery::test {

class ModelEngine : public BaseEngine {
 public:
  // `model` built as models::build_model builds it for an engine, with engine.seed (so the same weights as a GRPO
  // rollout or reference copy of it), in fp32 without autocast; the host loop splits batches by
  // engine.micro_batch_size_per_gpu.
  ModelEngine(const ModelConfig& model, const EngineConfig& engine) {
    models::BuildOptions options;
    options.seed = engine.seed;
    model_ = std::dynamic_pointer_cast<models::CausalLM>(models::build_model(model, "language_model", options));
    if (!model_) throw EngineryError("not a CausalLM", "ModelEngine");
    args_.model = model;
    args_.engine = engine;
    set_precision(Precision{c10::kFloat, c10::kFloat, c10::kFloat}, nullptr, ScalerMode::kNever);
  }

  models::CausalLM& model() { return *model_; }

  struct Call {
    Batch batch;          // the micro-batch as forward_step got it (packed, host_api/batch.h)
    bool forward_only;
  };
  const std::vector<Call>& calls() const { return calls_; }
  const std::vector<double>& grad_norms() const { return grad_norms_; }

  void initialize() override {}
  void optimizer_zero_grad() override { model_->zero_grad(); }
  torch::Tensor optimizer_step() override {
    double sum = 0.0;
    for (const auto& p : model_->parameters()) {
      if (p.grad().defined()) sum += p.grad().to(torch::kDouble).pow(2).sum().item<double>();
    }
    grad_norms_.push_back(std::sqrt(sum));
    return torch::tensor(grad_norms_.back(), torch::kDouble);
  }
  double lr_scheduler_step() override { return 0.0; }
  void get_per_tensor_param(
      const std::function<void(const std::string&, const torch::Tensor&)>& visit) override {
    for (const auto& item : model_->named_parameters()) visit(item.key(), item.value().detach());
  }
  void save_checkpoint(const std::string&, int64_t, int64_t) override {}
  void load_checkpoint(const std::string&) override {}
  int64_t get_data_parallel_rank() const override { return 0; }
  int64_t get_data_parallel_size() const override { return 1; }
  CommGroupPtr get_data_parallel_group() const override { return {}; }
  torch::Device device() const override { return torch::kCPU; }
  const EngineArgs& args() const override { return args_; }

 protected:
  MicroBatchResult forward_step(const Batch& micro_batch, const LossFn& loss_fn, const LossContext& ctx,
                                bool forward_only) override {
    calls_.push_back({micro_batch, forward_only});
    models::ModelInputs inputs;
    inputs.input_ids = micro_batch.at("input_ids");
    inputs.cu_seqlens = micro_batch.at("cu_seqlens");  // the loop hands engines packed micro-batches
    models::HeadOptions head;
    head.compute_entropy = ctx.calculate_entropy;
    head.temperature = batch_temperature(micro_batch);
    MicroBatchResult result;
    result.output = model_->forward(inputs, head, nullptr);
    if (loss_fn) {
      LossResult loss = loss_fn(result.output, micro_batch, ctx);
      result.loss = loss.loss;
      result.metrics = std::move(loss.metrics);
      if (!forward_only && torch::GradMode::is_enabled()) loss.loss.backward();
    }
    return result;
  }

 private:
  std::shared_ptr<models::CausalLM> model_;
  EngineArgs args_;
  std::vector<Call> calls_;
  std::vector<double> grad_norms_;
};

}  // namespace enginery::test
