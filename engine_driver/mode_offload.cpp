#include "engine_driver/mode_offload.h"

#include "host_api/error.h"

namespace enginery {

bool offloads_outside_modes(const EngineConfig& engine) {
  const auto it = engine.backend_options.find(kOffloadOutsideModes);
  if (it == engine.backend_options.end() || it->second == "false") return false;
  if (it->second == "true") return true;
  throw EngineryError("'" + it->second + "' is not a boolean",
                      "engine." + engine.strategy + "." + kOffloadOutsideModes, "true, false");
}

}  // namespace enginery
