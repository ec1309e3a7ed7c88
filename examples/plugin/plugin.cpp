// The plugin's one exported symbol (host_api/plugin_api.h) and its registrations. The keys registered here must
// equal the [[engines]] of plugin.toml.in, or the loader rejects the library.
#include <host_api/plugin_api.h>

#include "ddp_engine.h"

namespace example {
namespace {

void register_engines(enginery::Registrar& registrar) {
  for (const char* model_type : {"language_model", "value_model"}) {
    registrar.register_engine(
        {model_type, kBackend, "cpu"},
        [](const enginery::EngineArgs& args) {
          return std::make_shared<DdpEngine>(args);  // validates args: a bad value fails registry.create()
        },
        DdpEngine::config_support());
  }
}

}  // namespace
}  // namespace example

ENGINERY_DEFINE_PLUGIN("example_plugin", example::register_engines)
