#include "engine_driver/mode_guard.h"

#include <exception>
#include <iostream>

#include "engine_driver/engine_access.h"
#include "engine_driver/mode_offload.h"

namespace enginery {
namespace {

// What a mode guard brought to device() (ModeGuard::brought_).
constexpr uint8_t kBroughtModel = 1, kBroughtOptimizer = 2, kBroughtGrad = 4;

}  // namespace

ModeGuard::ModeGuard(BaseEngine* engine, bool previous_training)
    : engine_(engine),
      previous_training_(previous_training),
      uncaught_at_start_(std::uncaught_exceptions()) {
  if (engine_ != nullptr) ++EngineAccess::open_modes(*engine_);
}

ModeGuard::ModeGuard(ModeGuard&& other) noexcept
    : engine_(other.engine_),
      previous_training_(other.previous_training_),
      training_(other.training_),
      zero_grad_on_exit_(other.zero_grad_on_exit_),
      uncaught_at_start_(other.uncaught_at_start_),
      brought_(other.brought_) {
  other.engine_ = nullptr;
  other.brought_ = 0;
}

ModeGuard::~ModeGuard() {
  if (engine_ == nullptr) return;
  try {
    end(std::uncaught_exceptions() > uncaught_at_start_);
  } catch (const std::exception& e) {
    std::cerr << "enginery: zeroing the gradients at the end of train_mode() failed: " << e.what() << std::endl;
  } catch (...) {
    std::cerr << "enginery: zeroing the gradients at the end of train_mode() failed" << std::endl;
  }
}

void ModeGuard::end(bool raised) {
  if (engine_ == nullptr) return;
  std::exception_ptr failed;
  if (training_ && (zero_grad_on_exit_ || raised)) {
    try {
      engine_->optimizer_zero_grad();
    } catch (...) {
      failed = std::current_exception();
    }
  }
  --EngineAccess::open_modes(*engine_);
  EngineAccess::set_training(*engine_, previous_training_);
  send_back();
  engine_ = nullptr;
  if (failed) std::rethrow_exception(failed);
}

void ModeGuard::send_back() noexcept {
  if (brought_ == 0) return;
  const uint8_t parts = brought_;
  brought_ = 0;
  // A failed move leaves the state where it is (on the device, nothing lost); the next guard's start finds it
  // there and the next end tries again.
  try {
    engine_->to(torch::kCPU, parts & kBroughtModel, parts & kBroughtOptimizer, parts & kBroughtGrad);
  } catch (const std::exception& e) {
    std::cerr << "enginery: offload at the end of a mode (engine." << engine_->args().engine.strategy << "."
              << kOffloadOutsideModes << ") failed, the state stays on " << engine_->device() << ": " << e.what()
              << std::endl;
  }
}

ModeGuard enter_mode(BaseEngine& engine, bool training, const ModeOptions& options) {
  const bool outermost = EngineAccess::open_modes(engine) == 0;
  // Until the mode is entered the guard is a plain eval one: a failed bring unwinds through it without zeroing
  // anything (verl's contexts do not exit what they failed to enter).
  ModeGuard guard(&engine, engine.is_training());
  if (outermost && !options.disable_auto_offload && offloads_outside_modes(engine.args().engine)) {
    engine.to(engine.device(), /*model=*/true, /*optimizer=*/training, /*grad=*/training);
    guard.brought_ = kBroughtModel | (training ? kBroughtOptimizer | kBroughtGrad : 0);
  }
  EngineAccess::set_training(engine, training);
  guard.training_ = training;
  guard.zero_grad_on_exit_ = options.zero_grad_on_exit;
  return guard;
}

ModeGuard train_mode(BaseEngine& engine, const ModeOptions& options) { return enter_mode(engine, true, options); }

ModeGuard eval_mode(BaseEngine& engine, const ModeOptions& options) { return enter_mode(engine, false, options); }

}  // namespace enginery
