#include "host_api/base_engine.h"

#include "host_api/error.h"

namespace enginery {

GradScaler::~GradScaler() = default;

BaseEngine::BaseEngine() : precision_(), scaler_(nullptr) {}

BaseEngine::~BaseEngine() = default;

OffloadableEngine::~OffloadableEngine() = default;

void BaseEngine::to(const torch::Device& device, bool model, bool optimizer, bool grad) {
  if (auto* offloadable = dynamic_cast<OffloadableEngine*>(this)) {
    offloadable->move_state(device, model, optimizer, grad);
    return;
  }
  const EngineArgs& a = args();
  throw EngineryError("engine " + a.engine.strategy + " (" + a.model_type + ", " + a.device +
                          ") does not implement to(" + device.str() + "): it does not offload its state",
                      "BaseEngine::to", "engines whose plugin declares the capability 'offload'");
}

void BaseEngine::set_precision(const Precision& precision, std::unique_ptr<GradScaler> scaler, ScalerMode configured) {
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

// 2.3 added BaseEngine::open_modes_ in padding; plugins built against 2.0-2.2 allocate BaseEngine with the size
// below and lay their own members out after it.
static_assert(sizeof(BaseEngine) == 4 * sizeof(void*), "BaseEngine's size is part of host_api 2.x");

}  // namespace enginery
