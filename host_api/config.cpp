#include "host_api/config.h"

namespace enginery {

ModelSource ModelConfig::source() const {
  static const std::string kBuiltin = "builtin:";
  if (path.rfind(kBuiltin, 0) == 0) return {ModelSource::Kind::kBuiltin, path.substr(kBuiltin.size())};
  return {ModelSource::Kind::kHfDirectory, path};
}

const char* to_string(ScalerMode mode) {
  switch (mode) {
    case ScalerMode::kAuto:
      return "auto";
    case ScalerMode::kAlways:
      return "always";
    case ScalerMode::kNever:
      return "never";
  }
  return "unknown";
}

}  // namespace enginery
