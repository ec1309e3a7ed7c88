#include "plugin/veomni/veomni_settings.h"

#include "host_api/error.h"

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
    } else if (key == "offload_step") {
      // FSDPEngine's (where the offloaded optimizer step runs); it reads and checks it.
    } else {
      throw EngineryError("unknown option '" + key + "'", "engine.veomni." + key,
                          "enable_full_shard, mixed_precision, offload_step");
    }
  }
  return s;
}

}  // namespace veomni
}  // namespace enginery
