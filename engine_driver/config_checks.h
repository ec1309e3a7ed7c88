#pragma once
// The checks behind host_api/config_support.h (docs/ARCHITECTURE.md, "Configuration"): the registry refuses to build
// an engine whose configuration asks for a value its ConfigSupport lacks. The same table of knobs drives the
// conformance suite: for every knob an engine does not declare, it sets the knob's example value and expects the
// refusal.
#include <functional>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "host_api/config_support.h"

namespace enginery {

// One configurable behaviour an engine may or may not implement.
struct ConfigKnob {
  std::string key;  // the dotted config key, e.g. "engine.param_offload"
  // Empty when `args` asks for nothing beyond what `support` declares; else the offending value as text.
  std::function<std::string(const ConfigSupport& support, const EngineArgs& args)> unsupported_value;
  std::function<std::string(const ConfigSupport& support)> allowed;  // what the engine does support, as text
  // Changes `args` so that it asks for this knob beyond the defaults (for conformance), or returns false when
  // `support` leaves no value to ask for.
  std::function<bool(const ConfigSupport& support, EngineArgs& args)> set_unsupported;
};

// Every knob of host_api/config.h that an engine may leave out.
const std::vector<ConfigKnob>& config_knobs();

// Throws EngineryError when `args` sets a key to a value `support` lacks:
//   "<key>: <key> = <value> is not implemented by engine <engine> (allowed: <what it supports>)".
void check_config_supported(const ConfigSupport& support, const EngineArgs& args, const std::string& engine);

}  // namespace enginery
