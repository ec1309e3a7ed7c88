#pragma once
// `[engine.<backend>] offload_outside_modes` (docs/ARCHITECTURE.md, "The contract"): the state lives in host
// memory outside train_mode()/eval_mode(), as verl's colocated contexts keep it while the rollout generates. A
// backend option; a backend accepts it by listing kOffloadOutsideModes in its ConfigSupport::backend_options and
// offloading at the end of initialize() when it is on. The driver's mode guards (engine_driver/mode_guard.h) do
// the rest.
#include "host_api/config.h"

namespace enginery {

inline constexpr const char* kOffloadOutsideModes = "offload_outside_modes";

// Whether the engine configuration turns it on: absent or "false" is off, "true" on; any other value throws
// EngineryError naming engine.<backend>.offload_outside_modes.
bool offloads_outside_modes(const EngineConfig& engine);

}  // namespace enginery
