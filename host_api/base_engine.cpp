#include "host_api/base_engine.h"

namespace enginery {

GradScaler::~GradScaler() = default;

BaseEngine::BaseEngine() : autocast_dtype_(c10::kBFloat16), scaler_(nullptr) {}

BaseEngine::~BaseEngine() = default;

BaseEngine::ModeGuard::ModeGuard(BaseEngine* engine, bool previous_training)
    : engine_(engine), previous_training_(previous_training) {}

BaseEngine::ModeGuard::ModeGuard(ModeGuard&& other) noexcept
    : engine_(other.engine_), previous_training_(other.previous_training_) {
  other.engine_ = nullptr;
}

BaseEngine::ModeGuard::~ModeGuard() {
  if (engine_ != nullptr) engine_->set_training(previous_training_);
}

BaseEngine::ModeGuard BaseEngine::train_mode() {
  ModeGuard guard(this, training_);
  set_training(true);
  return guard;
}

BaseEngine::ModeGuard BaseEngine::eval_mode() {
  ModeGuard guard(this, training_);
  set_training(false);
  return guard;
}

BatchOutput BaseEngine::train_batch(const Batch& batch, const LossFn& loss_fn) {
  optimizer_zero_grad();
  BatchOutput out = forward_backward_batch(batch, loss_fn, /*forward_only=*/false);
  out.grad_norm = optimizer_step();
  out.lr = lr_scheduler_step();
  return out;
}

BatchOutput BaseEngine::infer_batch(const Batch& batch, const LossFn& loss_fn) {
  auto guard = eval_mode();
  torch::NoGradGuard no_grad;
  return forward_backward_batch(batch, loss_fn, /*forward_only=*/true);
}

}  // namespace enginery
