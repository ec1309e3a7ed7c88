#pragma once
// verl's train_mode() / eval_mode() contexts for any engine (docs/ARCHITECTURE.md, "The contract").
#include <cstdint>

#include "host_api/base_engine.h"

namespace enginery {

// What verl's contexts take (its BaseEngineCtx and EngineTrainModeCtx), with verl's defaults.
struct ModeOptions {
  // train_mode(): zero the gradients when the guard ends (always when its block threw). False hands them to the
  // next block, as verl's Tinker worker splits a step. eval_mode() never zeroes.
  bool zero_grad_on_exit = true;
  // The caller moves the state with to(); the guard moves nothing even with offload_outside_modes.
  bool disable_auto_offload = false;
};

// RAII mode switch: the previous mode comes back when the guard ends. With `[engine.<backend>]
// offload_outside_modes = true` (engine_driver/mode_offload.h) the outermost guard also moves state as verl's
// contexts do: train_mode() brings the model, optimizer and gradients to device(), eval_mode() the model, and the
// guard's end sends back what its start brought; nested guards move nothing.
class ModeGuard {
 public:
  ModeGuard(ModeGuard&& other) noexcept;
  ModeGuard& operator=(ModeGuard&&) = delete;
  ~ModeGuard();  // end(), with `raised` true while an exception unwinds through it; errors are printed, not thrown

  // Ends the mode now (a host whose exceptions are not C++'s, the Python binding, says whether its block raised).
  // Throws what zeroing the gradients throws; the mode and the offload end regardless. Once only.
  void end(bool raised);

 private:
  friend ModeGuard enter_mode(BaseEngine& engine, bool training, const ModeOptions& options);
  ModeGuard(BaseEngine* engine, bool previous_training);
  void send_back() noexcept;

  BaseEngine* engine_;
  bool previous_training_;
  bool training_ = false;
  bool zero_grad_on_exit_ = false;
  int uncaught_at_start_;
  uint8_t brought_ = 0;  // the parts this guard brought to device() (bits, mode_guard.cpp)
};

ModeGuard train_mode(BaseEngine& engine, const ModeOptions& options = {});
ModeGuard eval_mode(BaseEngine& engine, const ModeOptions& options = {});

}  // namespace enginery
