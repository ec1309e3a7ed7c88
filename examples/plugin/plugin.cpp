// The plugin's one exported symbol (host_api/plugin_api.h) and its registrations. The keys registered here must
// equal the [[engines]] of plugin.toml.in, or the loader rejects the library.
#include <host_api/plugin_api.h>

#include "ddp_engine.h"

namespace example {
namespace {

// Everything the engine declares, once: the configuration it honours and what it does beyond the required
// operations (fp32 and bf16 on the CPU, several ranks, checkpoints, the batch temperature). What it does not
// declare (offload, native weight export, shard export, train state) keeps BaseEngine's defaults.
enginery::EngineTraits traits() {
  enginery::EngineTraits t{DdpEngine::config_support(), {}};
  t.capabilities.verified_precisions = {c10::kFloat, c10::kBFloat16};
  t.capabilities.multi_rank = true;
  t.capabilities.checkpoint_same_world = true;
  t.capabilities.temperature = true;
  return t;
}

void register_engines(enginery::Registrar& registrar) {
  for (const char* model_type : {"language_model", "value_model"}) {
    registrar.register_engine(
        {model_type, kBackend, "cpu"},
        [](const enginery::EngineArgs& args) {
          return std::make_shared<DdpEngine>(args);  // validates args: a bad value fails registry.create()
        },
        traits());
  }
}

}  // namespace
}  // namespace example

ENGINERY_DEFINE_PLUGIN("example_plugin", example::register_engines)
