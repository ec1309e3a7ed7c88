#pragma once
// The Python module's door to the plugins (docs/ARCHITECTURE.md, "Plugins and packaging"): one registry per process,
// and engines built from verl's dotted config keys through the configuration library's reader (config/), so a
// key means the same in a TOML file, on the command line and in Python.
#include <memory>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "python/src/py_engine.h"

namespace enginery {
namespace python {

// Loads the plugins found in `dirs`, then ENGINERY_PLUGIN_PATH, then `bundled` (the package's own plugins; skipped
// quietly when absent), into the process's registry; a directory already searched is skipped. Returns {"loaded": [plugin names], "rejected": [(path, reason)]}.
py::dict load_plugins(const std::vector<std::string>& dirs, const std::string& bundled);
// Every registered engine: dicts of model_type, backend, device, plugin, manifest, capabilities.
py::list plugins();

// The dotted keys new_engine's config takes that an engine reads (model.*, engine.*, optim.*, checkpoint.*; the
// backend tables [engine.<backend>] aside): what a host mapping another framework's config onto enginery's reads.
std::vector<std::string> engine_config_keys();

// What new_engine got from Python.
struct EngineRequest {
  std::string model_type;
  std::string backend;
  std::string device;
  std::vector<std::pair<std::string, ConfigValue>> values;  // dotted key -> typed value (from_python_config)
  int64_t local_rank = 0;
};

// The config dict's (dotted key, value) pairs as typed values: bool, int, float, str, torch.dtype (its name) or a
// list of those; any other type is refused by name.
std::vector<std::pair<std::string, ConfigValue>> from_python_config(const py::list& items);

// Parses the values (only model.*, engine.*, optim.*, checkpoint.* and verl's optim.total_training_steps), and
// builds the engine through the registry, which refuses keys it does not honour. Errors name the offending key.
// `group` / `store`: the caller's torch.distributed default group (the c10d class the engines talk to) and its
// store, or None for a single process. The engine checks its batches' token ids against the model's vocabulary
// (engine_driver/batch_check.h), read from the model's config as `enginery train` reads it.
std::shared_ptr<PyEngine> new_engine(const EngineRequest& request, const py::object& group, const py::object& store);

}  // namespace python
}  // namespace enginery
