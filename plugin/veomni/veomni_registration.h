#pragma once
// VeOmniEngine's registrations. VeOmniEngine derives from fsdp::FSDPEngine, and no plugin links another plugin, so
// it is built into libenginery_fsdp.so and registered by that library's one entry point
// (plugin/fsdp/plugin_entry.cpp), which calls this.
#include "host_api/plugin_api.h"

namespace enginery {
namespace veomni {

// Backend veomni for both model types on cpu and cuda.
void register_veomni_engines(Registrar& registrar);

}  // namespace veomni
}  // namespace enginery
