// The host-owned micro-batch loop (docs/ARCHITECTURE.md, "One step"): the engine under test and a second engine
// written here (unsharded, fp32, built only on host_api and models) give the same loss, metrics and outputs on one
// batch, because both run the host's forward_backward_batch and implement only forward_step.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "models/model_factory.h"
#include "conformance/data.h"
#include "conformance/engine_setup.h"
#include "conformance/target.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace conformance {
namespace {

// The smallest engine the contract allows: the whole model on this rank in fp32, the loss's backward, no optimizer
// (this check runs forward_backward_batch only).
class ReferenceEngine : public BaseEngine {
 public:
  explicit ReferenceEngine(EngineArgs args) : args_(std::move(args)) {}
  void initialize() override {
    models::BuildOptions options;
    options.device = device();
    options.seed = args_.engine.seed;
    model_ = models::build_model(args_.model, args_.model_type, options);
    set_precision(Precision{c10::kFloat, c10::kFloat, c10::kFloat}, nullptr, args_.engine.grad_scaler.enabled);
  }
  // Takes the engine under test's weights, so the two differ only in how they run the step.
  void load_params(const ParamList& params) {
    torch::NoGradGuard no_grad;
    auto named = model_->named_parameters();
    for (const auto& [name, value] : params) named[name].copy_(value.to(named[name].device()));
  }
  void optimizer_zero_grad() override {
    for (auto& p : model_->parameters()) p.mutable_grad().reset();
  }
  torch::Tensor optimizer_step() override { throw unused("optimizer_step"); }
  double lr_scheduler_step() override { throw unused("lr_scheduler_step"); }
  void get_per_tensor_param(const std::function<void(const std::string&, const torch::Tensor&)>& visit) override {
    for (const auto& item : model_->named_parameters()) visit(item.key(), item.value().detach());
  }
  void save_checkpoint(const std::string&, int64_t, int64_t) override { throw unused("save_checkpoint"); }
  void load_checkpoint(const std::string&) override { throw unused("load_checkpoint"); }
  int64_t get_data_parallel_rank() const override { return 0; }
  int64_t get_data_parallel_size() const override { return 1; }
  CommGroupPtr get_data_parallel_group() const override { return args_.world_group; }
  torch::Device device() const override { return torch::Device(args_.device); }
  const EngineArgs& args() const override { return args_; }

 protected:
  MicroBatchResult forward_step(const Batch& micro_batch, const LossFn& loss_fn, const LossContext& ctx,
                                bool forward_only) override {
    models::ModelInputs inputs;
    inputs.input_ids = micro_batch.at("input_ids");
    inputs.cu_seqlens = micro_batch.at("cu_seqlens");
    if (micro_batch.has("position_ids")) inputs.position_ids = micro_batch.at("position_ids");
    models::HeadOptions head;
    head.compute_entropy = ctx.calculate_entropy;
    MicroBatchResult r;
    r.output = model_->forward(inputs, head, nullptr);
    LossResult loss = loss_fn(r.output, micro_batch, ctx);
    r.loss = loss.loss;
    r.metrics = std::move(loss.metrics);
    if (!forward_only) r.loss.backward();
    return r;
  }

 private:
  static EngineryError unused(const std::string& method) {
    return EngineryError(method + " is not part of the shared-loop check", "conformance reference engine");
  }
  EngineArgs args_;
  std::shared_ptr<models::DecoderModel> model_;
};

// The contract's loss plus two metrics whose micro-batch mean the suite can compute itself.
LossFn loss_with_metrics(const Target& target) {
  return [target](const ModelOutput& output, const Batch& micro_batch, const LossContext& ctx) {
    LossResult r;
    const torch::Tensor sum = token_loss_sum(target, head_of(target, output), micro_batch);
    r.loss = sum / ctx.global_num_tokens;
    r.metrics["token_loss_sum"] = sum.detach();
    r.metrics["micro_batch_index"] = torch::tensor(static_cast<double>(ctx.micro_batch_index));
    return r;
  };
}

void check_shared_loop_agrees(const Target& target) {
  EngineSpec spec;  // fp32, micro-batch size 2: the 4-row batch is two micro-batches
  auto engine = make_engine(target, spec);
  ReferenceEngine reference(engine_args(target, spec));
  reference.initialize();
  reference.load_params(read_params(*engine));
  const Batch batch = make_batch(target);
  const LossFn loss = loss_with_metrics(target);
  for (const bool forward_only : {true, false}) {
    SCOPED_TRACE(forward_only ? "forward_only" : "with backward");
    engine->optimizer_zero_grad();
    reference.optimizer_zero_grad();
    const BatchOutput a = forward_backward_batch(*engine, batch, loss, forward_only);
    const BatchOutput b = forward_backward_batch(reference, batch, loss, forward_only);
    ASSERT_TRUE(a.loss.defined());
    EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-5 * std::abs(b.loss.item<double>()) + 1e-7);
    ASSERT_EQ(a.metrics.size(), b.metrics.size());
    for (const auto& [name, value] : b.metrics) {
      ASSERT_TRUE(a.metrics.count(name)) << "metric " << name << " missing";
      EXPECT_NEAR(a.metrics.at(name).item<double>(), value.item<double>(), 1e-5 * std::abs(value.item<double>()) + 1e-6)
          << name;
    }
    // The mean over the two micro-batches, as the host loop defines it.
    EXPECT_DOUBLE_EQ(a.metrics.at("micro_batch_index").item<double>(), 0.5);
    const std::string head = head_name(target);
    ASSERT_TRUE(a.outputs.count(head));
    EXPECT_LT(max_abs_diff(a.outputs.at(head), b.outputs.at(head)), 1e-4) << head;
  }
}

// The batch with every row's padding moved to the left (verl's prompt side), tokens and targets moved with it.
Batch left_padded(const Batch& batch) {
  Batch out = batch;
  const auto lengths = batch.at("attention_mask").sum(1).cpu();
  const int64_t seq = batch.at("attention_mask").size(1);
  for (const auto& [name, t] : batch.tensors()) {
    if (t.dim() != 2 || t.size(1) != seq) continue;
    std::vector<torch::Tensor> rows;
    for (int64_t r = 0; r < t.size(0); ++r) rows.push_back(t[r].roll(seq - lengths[r].item<int64_t>()));
    out.set(name, torch::stack(rows));
  }
  return out;
}

std::string skip_unless_remove_padding(const Target& target) {
  const std::string precision = requires_precisions({"fp32"})(target);
  if (!precision.empty()) return precision;
  for (const EngineInfo& info : target.registry->list()) {
    if (!(info.key == target.key)) continue;
    return info.support.remove_padding ? "" : "the engine does not declare model.use_remove_padding";
  }
  return "the engine is not registered";
}

void check_remove_padding_agrees(const Target& target) {
  EngineSpec dense;
  EngineSpec packed;
  packed.adjust = [](EngineArgs& args) { args.model.use_remove_padding = true; };
  auto a = make_engine(target, dense);
  auto b = make_engine(target, packed);
  const LossFn loss = loss_with_metrics(target);
  const Batch right = make_batch(target);
  for (const Batch& batch : {right, left_padded(right)}) {
    SCOPED_TRACE(&batch == &right ? "right padded" : "left padded");
    const BatchOutput x = train_batch(*a, batch, loss);
    const BatchOutput y = train_batch(*b, batch, loss);
    EXPECT_NEAR(y.loss.item<double>(), x.loss.item<double>(), 1e-5 * std::abs(x.loss.item<double>()) + 1e-7);
    EXPECT_NEAR(y.grad_norm.item<double>(), x.grad_norm.item<double>(), 1e-5 * x.grad_norm.item<double>());
    const std::string head = head_name(target);
    EXPECT_LT(max_abs_diff(y.outputs.at(head), x.outputs.at(head)), 1e-4) << head;
  }
}

// The same sequences packed ([Note: packed batch], host_api/batch.h) and padded: one loss, one gradient norm, and
// the outputs of each token in verl's alignment (log_probs[t] of the padded layout's t + 1, 0 at a sequence's last
// token; values at t).
void check_packed_batch_agrees(const Target& target) {
  EngineSpec spec;
  auto a = make_engine(target, spec);
  auto b = make_engine(target, spec);
  const LossFn loss = token_mean_loss(target);
  const Batch padded = make_batch(target);
  const Batch packed = packed_batch(padded);
  const BatchOutput x = train_batch(*a, padded, loss);
  const BatchOutput y = train_batch(*b, packed, loss);
  EXPECT_NEAR(y.loss.item<double>(), x.loss.item<double>(), 1e-5 * std::abs(x.loss.item<double>()) + 1e-7);
  EXPECT_NEAR(y.grad_norm.item<double>(), x.grad_norm.item<double>(), 1e-5 * x.grad_norm.item<double>());
  const std::string head = head_name(target);
  const torch::Tensor padded_out = infer_batch(*a, padded).outputs.at(head).cpu();
  const torch::Tensor packed_out = infer_batch(*b, packed).outputs.at(head).cpu();
  const bool shifted = !target.value_model();
  const auto ends = packed.at("cu_seqlens");
  ASSERT_EQ(packed_out.size(0), ends[-1].item<int64_t>()) << head << ": one entry per token";
  for (int64_t r = 0; r < padded.size(); ++r) {
    const int64_t begin = ends[r].item<int64_t>(), n = ends[r + 1].item<int64_t>() - begin;
    const torch::Tensor want = shifted ? torch::cat({padded_out[r].narrow(0, 1, n - 1), torch::zeros({1})})
                                       : padded_out[r].narrow(0, 0, n);
    EXPECT_LT(max_abs_diff(packed_out.narrow(0, begin, n), want), 1e-4) << head << ", sequence " << r;
  }
}

}  // namespace

void add_loop_checks(std::vector<Check>& checks) {
  checks.push_back({"shared_loop_agrees",
                    "the engine and an unsharded reference engine give the same loss, metrics and outputs through "
                    "the host's micro-batch loop",
                    requires_precisions({"fp32"}), check_shared_loop_agrees});
  checks.push_back({"remove_padding_agrees",
                    "model.use_remove_padding (valid tokens packed, attention per sequence) gives the padded run's "
                    "loss, gradient norm and outputs on right- and left-padded batches",
                    skip_unless_remove_padding, check_remove_padding_agrees});
  checks.push_back({"packed_batch_agrees",
                    "a packed batch (cu_seqlens, verl's no-padding layout) gives the padded batch's loss, gradient "
                    "norm and per-token outputs in verl's alignment",
                    requires_precisions({"fp32"}), check_packed_batch_agrees});
}

}  // namespace conformance
}  // namespace enginery
