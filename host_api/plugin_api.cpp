#include "host_api/plugin_api.h"

#include <tuple>

namespace enginery {

bool EngineKey::operator<(const EngineKey& o) const {
  return std::tie(model_type, backend, device) < std::tie(o.model_type, o.backend, o.device);
}
bool EngineKey::operator==(const EngineKey& o) const {
  return std::tie(model_type, backend, device) == std::tie(o.model_type, o.backend, o.device);
}
std::string EngineKey::str() const { return "(" + model_type + ", " + backend + ", " + device + ")"; }

Registrar::~Registrar() = default;

}  // namespace enginery
