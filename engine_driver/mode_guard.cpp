#include "engine_driver/mode_guard.h"

#include <iostream>

#include "engine_driver/engine_access.h"
#include "engine_driver/mode_offload.h"

namespace enginery {
namespace {

// What a mode guard brought to device() (ModeGuard::brought_).
constexpr uint8_t kBroughtModel = 1, kBroughtOptimizer = 2, kBroughtGrad = 4;

}  // namespace

ModeGuard::ModeGuard(BaseEngine* engine, bool previous_training)
    : engine_(engine), previous_training_(previous_training) {
  if (engine_ != nullptr) ++EngineAccess::open_modes(*engine_);
}

ModeGuard::ModeGuard(ModeGuard&& other) noexcept
    : engine_(other.engine_), previous_training_(other.previous_training_), brought_(other.brought_) {
  other.engine_ = nullptr;
  other.brought_ = 0;
}

ModeGuard::~ModeGuard() {
  if (engine_ == nullptr) return;
  --EngineAccess::open_modes(*engine_);
  EngineAccess::set_training(*engine_, previous_training_);
  if (brought_ == 0) return;
  // A destructor cannot throw. A failed move leaves the state where it is (on the device, nothing lost); the next
  // guard's start finds it there and the next end tries again.
  try {
    engine_->to(torch::kCPU, brought_ & kBroughtModel, brought_ & kBroughtOptimizer, brought_ & kBroughtGrad);
  } catch (const std::exception& e) {
    std::cerr << "enginery: offload at the end of a mode (engine." << engine_->args().engine.strategy << "."
              << kOffloadOutsideModes << ") failed, the state stays on " << engine_->device() << ": " << e.what()
              << std::endl;
  }
}

ModeGuard enter_mode(BaseEngine& engine, bool training) {
  const bool outermost = EngineAccess::open_modes(engine) == 0;
  ModeGuard guard(&engine, engine.is_training());
  if (outermost && offloads_outside_modes(engine.args().engine)) {
    engine.to(engine.device(), /*model=*/true, /*optimizer=*/training, /*grad=*/training);  // throws: the guard undoes the count
    guard.brought_ = kBroughtModel | (training ? kBroughtOptimizer | kBroughtGrad : 0);
  }
  EngineAccess::set_training(engine, training);
  return guard;
}

ModeGuard train_mode(BaseEngine& engine) { return enter_mode(engine, true); }

ModeGuard eval_mode(BaseEngine& engine) { return enter_mode(engine, false); }

}  // namespace enginery
