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

std::string host_torch_version() { return ENGINERY_TORCH_VERSION_STRING; }
int host_cxx11_abi() { return _GLIBCXX_USE_CXX11_ABI; }

}  // namespace enginery
