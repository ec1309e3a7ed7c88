#include "engine_driver/mode_offload.h"

#include "host_api/error.h"

namespace enginery {

bool offloads_outside_modes(const EngineConfig& engine) {
  return backend_option<bool>(engine, kOffloadOutsideModes, false);
}

}  // namespace enginery
