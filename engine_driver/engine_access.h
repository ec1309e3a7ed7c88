#pragma once
// The one door from the host's driver into BaseEngine's protected parts (host_api/base_engine.h befriends it):
// the step loop calls forward_step, the mode guards switch the mode and count the open guards. Not for plugins.
#include "host_api/base_engine.h"

namespace enginery {

struct EngineAccess {
  static MicroBatchResult forward_step(BaseEngine& e, const Batch& micro_batch, const LossFn& loss_fn,
                                       const LossContext& ctx, bool forward_only) {
    return e.forward_step(micro_batch, loss_fn, ctx, forward_only);
  }
  static void set_training(BaseEngine& e, bool training) { e.set_training(training); }
  static uint16_t& open_modes(BaseEngine& e) { return e.open_modes_; }
};

}  // namespace enginery
