#pragma once
// The fingerprint of the enginery headers this host was built with (cmake/EngineryHeaderFingerprint.cmake): the
// headers a plugin compiles against (host_api, models, support, kernels as installed). A plugin reports its own in
// PluginInfo; the loader refuses one built against other headers (docs/ARCHITECTURE.md, "Version compatibility").
#include <string>

namespace enginery {

std::string host_header_fingerprint();

}  // namespace enginery
