#include "plugin/veomni/veomni_settings.h"

#include "host_api/error.h"
#include "engine_driver/mode_offload.h"

namespace enginery {
namespace veomni {
VeOmniSettings parse_settings(const EngineConfig& engine) {
  VeOmniSettings s;
  for (const auto& [key, value] : engine.backend_options) {
    if (key == "enable_full_shard") {
      s.enable_full_shard = backend_option<bool>(engine, key, s.enable_full_shard);
    } else if (key == "mixed_precision") {
      s.mixed_precision = backend_option<bool>(engine, key, s.mixed_precision);
    } else if (key == "offload_step" || key == kOffloadOutsideModes || key == "fp8") {
      // FSDPEngine's (where the offloaded optimizer step runs; state on the host outside the mode contexts; FP8
      // matmuls): it reads and checks them.
    } else {
      throw EngineryError("unknown option '" + key + "'", "engine.veomni." + key,
                          "enable_full_shard, mixed_precision, offload_step, offload_outside_modes, fp8");
    }
  }
  return s;
}

}  // namespace veomni
}  // namespace enginery
