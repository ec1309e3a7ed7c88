#include "plugin/veomni/veomni_settings.h"

#include <algorithm>
#include <vector>

#include "host_api/error.h"
#include "plugin/fsdp/backend_options.h"
#include "plugin/fsdp/ulysses.h"
#include "support/list_text.h"

namespace enginery {
namespace veomni {

std::vector<std::string> option_names() {
  std::vector<std::string> names = {"enable_full_shard", "mixed_precision"};
  for (const auto& name : fsdp::BackendOptions::names()) {
    if (name != fsdp::kUlyssesSize) names.push_back(name);
  }
  return names;
}

VeOmniSettings parse_settings(const EngineConfig& engine) {
  VeOmniSettings s;
  for (const auto& [key, value] : engine.backend_options) {
    if (key == "enable_full_shard") {
      s.enable_full_shard = backend_option<bool>(engine, key, s.enable_full_shard);
    } else if (key == "mixed_precision") {
      s.mixed_precision = backend_option<bool>(engine, key, s.mixed_precision);
    } else if (const auto names = option_names(); std::find(names.begin(), names.end(), key) == names.end()) {
      throw EngineryError("unknown option '" + key + "'", "engine.veomni." + key, join_list(names));
    }
  }
  return s;
}

}  // namespace veomni
}  // namespace enginery
