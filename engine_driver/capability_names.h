#pragma once
// The words of an engine's declared traits, as `enginery plugins`, the Python `plugins()` and the conformance suite
// name them (conformance/README.md): precision-<device>-<dtype>, multi-rank, checkpoint-same-world, grad-scaler,
// temperature, offload, offload-modes, weight-export, shard-export, train-state, hsdp, reshard-after-forward.
#include <string>
#include <vector>

#include "host_api/plugin_api.h"

namespace enginery {

// Sorted. Derived from the one declaration: Capabilities' flags, and for hsdp, reshard-after-forward and
// offload-modes the ConfigSupport that already says so.
std::vector<std::string> capability_names(const EngineTraits& traits, const std::string& device);

}  // namespace enginery
