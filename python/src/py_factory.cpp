#include "python/src/py_factory.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "config/engine_settings.h"
#include "config/model_limits.h"
#include "config/schema.h"
#include "config/train_config.h"
#include "host_api/error.h"
#include "kernels/runtime_switch.h"
#include "registry/plugin_loader.h"

namespace enginery {
namespace python {
namespace {

const char* kConfigSource = "new_engine config";

EngineRegistry& registry() {
  // Never destroyed: engines and their plugin libraries may outlive the module's teardown at interpreter exit.
  static EngineRegistry* instance = new EngineRegistry();
  return *instance;
}

// The config dict holds engine settings only: the trainer's own sections mean nothing to an engine.
void check_engine_key(const std::string& key) {
  if (!is_engine_key(key)) {
    throw EngineryError("'" + key + "' is not an engine setting", kConfigSource, engine_sections_allowed());
  }
}

// The schema's keys of the engine sections that a run reads (config/schema.h's why_not_read says which a
// run never reads, whatever their value).
class EngineKeys final : public ConfigVisitor {
 public:
  explicit EngineKeys(const TrainConfig& config) : config_(config) {}
  std::vector<std::string> keys;

  void field(const std::string& key, int64_t&) override { add(key); }
  void field(const std::string& key, double&) override { add(key); }
  void field(const std::string& key, bool&) override { add(key); }
  void field(const std::string& key, std::string&) override { add(key); }
  void field(const std::string& key, std::vector<std::string>&) override { add(key); }
  void field(const std::string& key, std::optional<double>&) override { add(key); }
  void field(const std::string& key, std::optional<std::string>&) override { add(key); }
  void field(const std::string& key, double (&)[2]) override { add(key); }
  void choice(const std::string& key, std::string&, const std::vector<std::string>&) override { add(key); }
  void precision(const std::string& key, c10::ScalarType&) override { add(key); }
  void optional_precision(const std::string& key, std::optional<c10::ScalarType>&) override { add(key); }
  void scaler_mode(const std::string& key, ScalerMode&) override { add(key); }
  bool has_table(const std::string&) override { return false; }
  void backend_table(const std::string&, const std::string&, std::map<std::string, ScalarValue>&) override {}

 private:
  void add(const std::string& key) {
    if (is_engine_key(key) && why_not_read(config_, key).reason.empty()) keys.push_back(key);
  }
  const TrainConfig& config_;
};

// verl's optim.total_training_steps, which the trainer computes itself and so is not in the TOML schema.
int64_t total_steps(const ConfigValue& value) {
  const ScalarValue* scalar = std::get_if<ScalarValue>(&value);
  const int64_t* steps = scalar != nullptr ? std::get_if<int64_t>(scalar) : nullptr;
  if (steps == nullptr || *steps < 0) {
    const std::string given = steps != nullptr ? std::to_string(*steps) : "a value of another type";
    throw EngineryError("optim.total_training_steps = " + given + " is not a step count",
                        std::string(kConfigSource) + " optim.total_training_steps", "an integer >= 0");
  }
  return *steps;
}

TrainConfig parse_config(const EngineRequest& request) {
  std::vector<std::pair<std::string, ConfigValue>> values;
  std::optional<int64_t> steps;
  bool strategy_given = false;
  for (const auto& [key, value] : request.values) {
    if (key == "optim.total_training_steps") {
      steps = total_steps(value);
      continue;
    }
    check_engine_key(key);
    strategy_given = strategy_given || key == "engine.strategy";
    values.emplace_back(key, value);
  }
  // verl's engine_config carries the backend as `strategy` too; the two must agree.
  if (!strategy_given) values.emplace_back("engine.strategy", ScalarValue(request.backend));
  TrainConfig config = train_config_from_values(values, kConfigSource);
  if (config.engine.strategy != request.backend) {
    throw EngineryError("engine.strategy = '" + config.engine.strategy + "' disagrees with the backend argument '" +
                            request.backend + "'",
                        config.where("engine.strategy"), request.backend);
  }
  if (steps) config.optim.total_training_steps = *steps;
  return config;
}

// One scalar of the config dict; `key` names it in the refusal.
ScalarValue scalar_from_python(const std::string& key, const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) {
    try {
      return value.cast<int64_t>();
    } catch (const py::cast_error&) {
      throw EngineryError(key + " = " + py::str(value).cast<std::string>() + " does not fit 64 bits",
                          std::string(kConfigSource) + " " + key, "an integer of 64 bits");
    }
  }
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (THPDtype_Check(value.ptr())) {
    const std::string name = py::str(value).cast<std::string>();  // "torch.bfloat16"
    return name.substr(name.rfind('.') + 1);
  }
  throw EngineryError(key + " is a " + py::str(py::type::of(value).attr("__name__")).cast<std::string>(),
                      std::string(kConfigSource) + " " + key, "bool, int, float, str, list, dict, torch.dtype");
}

void set_group(EngineArgs& args, const py::object& group, const py::object& store) {
  if (group.is_none()) return;
  try {
    args.world_group = group.cast<CommGroupPtr>();
    if (!store.is_none()) args.store = store.cast<StorePtr>();
  } catch (const py::cast_error&) {
    throw EngineryError("the process group is not a c10d group of the LibTorch this module was built with",
                        "new_engine", "the group torch.distributed.init_process_group made, in this torch");
  }
  args.rank = args.world_group->getRank();
  args.world_size = args.world_group->getSize();
}

}  // namespace

std::vector<std::pair<std::string, ConfigValue>> from_python_config(const py::list& items) {
  std::vector<std::pair<std::string, ConfigValue>> values;
  for (const py::handle& item : items) {
    const auto pair = item.cast<py::tuple>();
    const std::string key = pair[0].cast<std::string>();
    const py::handle value = pair[1];
    if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      ConfigList list;
      for (const py::handle& element : value) list.push_back(scalar_from_python(key, element));
      values.emplace_back(key, std::move(list));
    } else {
      values.emplace_back(key, scalar_from_python(key, value));
    }
  }
  return values;
}

std::vector<std::string> engine_config_keys() {
  TrainConfig defaults;
  EngineKeys visitor(defaults);
  visit_config(visitor, defaults);
  visitor.keys.emplace_back("optim.total_training_steps");  // verl's, which parse_config takes besides the schema
  return visitor.keys;
}

py::dict load_plugins(const std::vector<std::string>& dirs, const std::string& bundled) {
  // Searching a directory twice would register its engines twice, which the registry refuses.
  static std::set<std::string> searched;
  const std::vector<std::filesystem::path> wanted(dirs.begin(), dirs.end());
  std::vector<PluginSearchDir> path;
  std::vector<std::string> names;
  for (auto& dir : PluginLoader::search_path(wanted, "load_plugins", std::getenv(kPluginPathEnv), bundled)) {
    std::error_code ec;
    const std::filesystem::path canonical = std::filesystem::weakly_canonical(dir.path, ec);
    const std::string name = (ec ? dir.path : canonical).string();
    if (searched.count(name) == 0 && std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(name);
      // A folder the caller named must exist and hold a plugin that loads (as --plugin-dir): an error naming it.
      dir.required = dir.source == "load_plugins";
      path.push_back(std::move(dir));
    }
  }
  // Remembered once searched: a load that throws leaves them to be searched again.
  const PluginLoadReport report = PluginLoader(std::move(path)).load(registry());
  searched.insert(names.begin(), names.end());
  check_required_dirs(report);
  py::list loaded;
  for (const auto& plugin : report.loaded) loaded.append(plugin.manifest.name);
  py::list rejected;
  for (const auto& plugin : report.rejected) rejected.append(py::make_tuple(plugin.path.string(), plugin.reason));
  py::dict out;
  out["loaded"] = loaded;
  out["rejected"] = rejected;
  return out;
}

py::list plugins() {
  py::list out;
  for (const auto& info : registry().list()) {
    py::dict item;
    item["model_type"] = info.key.model_type;
    item["backend"] = info.key.backend;
    item["device"] = info.key.device;
    item["plugin"] = info.origin.plugin;
    item["manifest"] = info.origin.manifest;
    item["capabilities"] = info.capabilities;
    out.append(item);
  }
  return out;
}

// What batches are checked against beyond their layout: the vocabulary of the model's config (its config.json, or
// the built-in's). A config this reader cannot read leaves token ids checked >= 0 only: the plugin, not this reader,
// decides which models it builds, and reports a config it cannot build itself, in initialize().
BatchLimits batch_limits(const TrainConfig& config) {
  try {
    return BatchLimits{model_token_limits(config).vocab_size};
  } catch (const std::exception&) {
    return BatchLimits{};
  }
}

std::shared_ptr<PyEngine> new_engine(const EngineRequest& request, const py::object& group, const py::object& store) {
  // A bad ENGINERY_CUDA_KERNELS is refused here, as `enginery train` does before launch, not inside a forward
  kernels::check_runtime_switch();
  const TrainConfig config = parse_config(request);
  EngineArgs args;
  args.model_type = request.model_type;
  args.device = request.device;
  args.local_rank = request.local_rank;
  set_engine_settings(args, config);
  set_group(args, group, store);
  std::shared_ptr<BaseEngine> engine;
  try {
    py::gil_scoped_release release;
    engine = registry().create(request.model_type, request.backend, request.device, args);
  } catch (const EngineryError& e) {
    rethrow_at_origin(e, config);  // the entry of the user's dict that set the key
  }
  return std::make_shared<PyEngine>(std::move(engine), batch_limits(config));
}

}  // namespace python
}  // namespace enginery
