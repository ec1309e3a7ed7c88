#include "host_api/base_engine.h"

#include <utility>

#include "host_api/error.h"

namespace enginery {
namespace {

// export_weights of an engine that does not stream natively: everything get_per_tensor_param yields, cast and
// copied, as one group. Correct, but the extra memory is the whole model.
class CollectedWeightStream final : public WeightStream {
 public:
  explicit CollectedWeightStream(std::vector<NamedTensor> all) : all_(std::move(all)) {}
  std::vector<NamedTensor> next() override { return std::exchange(all_, {}); }

 private:
  std::vector<NamedTensor> all_;
};

}  // namespace

GradScaler::~GradScaler() = default;

BaseEngine::BaseEngine() : precision_(), scaler_(nullptr) {}

BaseEngine::~BaseEngine() = default;

void BaseEngine::refuse(const std::string& operation, const std::string& capability) const {
  const EngineArgs& a = args();
  throw EngineryError("engine " + a.engine.strategy + " (" + a.model_type + ", " + a.device + ") does not implement " +
                          operation + ": its plugin does not declare the capability '" + capability + "'",
                      "BaseEngine::" + operation, "engines whose registration declares '" + capability + "'");
}

void BaseEngine::move_state(const torch::Device& device, bool, bool, bool) {
  refuse("to(" + device.str() + ")", "offload");
}

std::unique_ptr<WeightStream> BaseEngine::export_weights(c10::ScalarType dtype) {
  std::vector<NamedTensor> all;
  get_per_tensor_param([&](const std::string& name, const torch::Tensor& full) {
    all.push_back({name, full.detach().to(dtype, /*non_blocking=*/false, /*copy=*/true)});
  });
  return std::make_unique<CollectedWeightStream>(std::move(all));
}

ShardPlacement BaseEngine::shard_placement() const { refuse("shard_placement", "shard-export"); }

std::unique_ptr<ShardStream> BaseEngine::export_shards(c10::ScalarType) { refuse("export_shards", "shard-export"); }

std::vector<LocalParameter> BaseEngine::local_parameters() { refuse("local_parameters", "train-state"); }

OptimizerHyperparameters BaseEngine::optimizer_hyperparameters() const {
  refuse("optimizer_hyperparameters", "train-state");
}

void BaseEngine::set_optimizer_hyperparameters(const OptimizerHyperparameters&) {
  refuse("set_optimizer_hyperparameters", "train-state");
}

void BaseEngine::set_precision(const Precision& precision, std::unique_ptr<GradScaler> scaler, ScalerMode configured) {
  // [Note: precision policy] (host_api/base_engine.h).
  if (precision.param_dtype == c10::kHalf && !scaler && configured != ScalerMode::kNever) {
    throw EngineryError("fp16 compute needs a grad scaler; an engine may run fp16 unscaled only when the user set "
                        "engine.grad_scaler.enabled = \"never\"",
                        "engine.mixed_precision.param_dtype", "bf16, fp32, or fp16 with a scaler");
  }
  if (scaler && configured == ScalerMode::kNever) {
    throw EngineryError("a grad scaler was installed although the configuration says never",
                        "engine.grad_scaler.enabled", "auto, always");
  }
  precision_ = precision;
  scaler_ = std::move(scaler);
}

}  // namespace enginery
