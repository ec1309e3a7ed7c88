#pragma once
// The one door from the host's driver into BaseEngine's protected parts (host_api/base_engine.h befriends it):
// the step loop calls forward_step, the mode guards switch the mode and count the open guards, the registry
// records what the engine declared. Not for plugins.
#include "host_api/base_engine.h"

namespace enginery {

struct EngineAccess {
  static MicroBatchResult forward_step(BaseEngine& e, const Batch& micro_batch, const LossFn& loss_fn,
                                       const LossContext& ctx, bool forward_only) {
    return e.forward_step(micro_batch, loss_fn, ctx, forward_only);
  }
  static void set_training(BaseEngine& e, bool training) { e.set_training(training); }
  static int& open_modes(BaseEngine& e) { return e.open_modes_; }
  // What the engine's registration declared; the registry sets it when it creates the engine.
  static Capabilities& declared(BaseEngine& e) { return e.declared_; }
};

}  // namespace enginery
