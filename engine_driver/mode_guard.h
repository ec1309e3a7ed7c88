#pragma once
// verl's train_mode() / eval_mode() contexts for any engine (docs/ARCHITECTURE.md, "The contract").
#include <cstdint>

#include "host_api/base_engine.h"

namespace enginery {

// RAII mode switch: the previous mode comes back when the guard dies. With `[engine.<backend>]
// offload_outside_modes = true` (engine_driver/mode_offload.h) the outermost guard also moves state as verl's
// contexts do: train_mode() brings the model, optimizer and gradients to device(), eval_mode() the model, and the
// guard's end sends back what its start brought; nested guards move nothing.
class ModeGuard {
 public:
  ModeGuard(ModeGuard&& other) noexcept;
  ModeGuard& operator=(ModeGuard&&) = delete;
  ~ModeGuard();

 private:
  friend ModeGuard enter_mode(BaseEngine& engine, bool training);
  ModeGuard(BaseEngine* engine, bool previous_training);

  BaseEngine* engine_;
  bool previous_training_;
  uint8_t brought_ = 0;  // the parts this guard brought to device() (bits, mode_guard.cpp)
};

ModeGuard train_mode(BaseEngine& engine);
ModeGuard eval_mode(BaseEngine& engine);

}  // namespace enginery
