#include "plugin/veomni/veomni_settings.h"

#include "host_api/error.h"
#include "engine_driver/mode_offload.h"

namespace enginery {
namespace veomni {
namespace {

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "true") return true;
  if (value == "false") return false;
  throw EngineryError("bad value '" + value + "'", "engine.veomni." + key, "true, false");
}

}  // namespace

VeOmniSettings parse_settings(const EngineConfig& engine) {
  VeOmniSettings s;
  for (const auto& [key, value] : engine.backend_options) {
    if (key == "enable_full_shard") {
      s.enable_full_shard = parse_bool(key, value);
    } else if (key == "mixed_precision") {
      s.mixed_precision = parse_bool(key, value);
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
