#include "engine_driver/config_checks.h"

#include <algorithm>

#include "host_api/base_engine.h"
#include "host_api/error.h"
#include "engine_driver/precision.h"
#include "support/list_text.h"

namespace enginery {
namespace {

template <typename T>
bool contains(const std::vector<T>& items, const T& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

std::string join(const std::vector<std::string>& items) {
  return items.empty() ? "nothing but the default" : join_list(items);
}

std::string dtypes_text(const std::vector<c10::ScalarType>& dtypes) {
  std::vector<std::string> names;
  for (auto d : dtypes) names.push_back(PrecisionType::to_str(d));
  return join(names);
}

// A dtype knob: the engine lists the dtypes it implements.
ConfigKnob dtype_knob(const std::string& key, std::vector<c10::ScalarType> ConfigSupport::*supported,
                      c10::ScalarType (*get)(const EngineArgs&), void (*set)(EngineArgs&, c10::ScalarType)) {
  ConfigKnob knob;
  knob.key = key;
  knob.unsupported_value = [supported, get](const ConfigSupport& s, const EngineArgs& a) -> std::string {
    return contains(s.*supported, get(a)) ? "" : PrecisionType::to_str(get(a));
  };
  knob.allowed = [supported](const ConfigSupport& s) { return dtypes_text(s.*supported); };
  knob.set_unsupported = [supported, set](const ConfigSupport& s, EngineArgs& a) {
    for (auto d : {c10::kHalf, c10::kBFloat16, c10::kFloat}) {
      if (!contains(s.*supported, d)) {
        set(a, d);
        return true;
      }
    }
    return false;
  };
  return knob;
}

// A boolean knob whose default is `default_value`: the engine either implements the other value or not.
ConfigKnob flag_knob(const std::string& key, bool ConfigSupport::*supported, bool& (*field)(EngineArgs&),
                     bool default_value) {
  ConfigKnob knob;
  knob.key = key;
  knob.unsupported_value = [=](const ConfigSupport& s, const EngineArgs& a) -> std::string {
    const bool value = field(const_cast<EngineArgs&>(a));
    if (value == default_value || s.*supported) return "";
    return value ? "true" : "false";
  };
  knob.allowed = [=](const ConfigSupport& s) -> std::string {
    if (s.*supported) return "true, false";
    return default_value ? "true" : "false";
  };
  knob.set_unsupported = [=](const ConfigSupport& s, EngineArgs& a) {
    if (s.*supported) return false;
    field(a) = !default_value;
    return true;
  };
  return knob;
}

ConfigKnob scaler_knob() {
  ConfigKnob knob;
  knob.key = "engine.grad_scaler.enabled";
  knob.unsupported_value = [](const ConfigSupport& s, const EngineArgs& a) -> std::string {
    return contains(s.scaler_modes, a.engine.grad_scaler.enabled) ? "" : to_string(a.engine.grad_scaler.enabled);
  };
  knob.allowed = [](const ConfigSupport& s) {
    std::vector<std::string> names;
    for (auto m : s.scaler_modes) names.push_back(to_string(m));
    return join(names);
  };
  knob.set_unsupported = [](const ConfigSupport& s, EngineArgs& a) {
    for (auto m : {ScalerMode::kAuto, ScalerMode::kAlways, ScalerMode::kNever}) {
      if (!contains(s.scaler_modes, m)) {
        a.engine.grad_scaler.enabled = m;
        return true;
      }
    }
    return false;
  };
  return knob;
}

ConfigKnob hsdp_knob() {
  ConfigKnob knob;
  knob.key = "engine.fsdp_size";
  knob.unsupported_value = [](const ConfigSupport& s, const EngineArgs& a) -> std::string {
    const int64_t n = a.engine.fsdp_size;
    // verl's reading (its create_device_mesh): below 0, or as large as the world or larger, is whole-world sharding.
    if (s.hsdp || n < 0 || n >= a.world_size) return "";
    return std::to_string(n);
  };
  knob.allowed = [](const ConfigSupport& s) -> std::string {
    return s.hsdp ? "-1, a divisor of the world size, or more than it" : "-1, or the world size or more (no HSDP)";
  };
  knob.set_unsupported = [](const ConfigSupport& s, EngineArgs& a) {
    if (s.hsdp) return false;
    if (a.world_size < 2) return false;  // every size means the whole world
    a.engine.fsdp_size = 1;
    return true;
  };
  return knob;
}

// checkpoint.save_contents / load_contents.
ConfigKnob contents_knob(const std::string& key, std::vector<std::string>& (*field)(EngineArgs&)) {
  ConfigKnob knob;
  knob.key = key;
  knob.unsupported_value = [=](const ConfigSupport& s, const EngineArgs& a) -> std::string {
    const auto& items = field(const_cast<EngineArgs&>(a));
    for (const auto& item : items) {
      if (!contains(s.checkpoint_contents, item)) return "[" + join(items) + "]";
    }
    if (s.checkpoint_content_subsets) return "";
    for (const auto& item : CheckpointConfig{}.save_contents) {
      if (!contains(items, item)) return "[" + join(items) + "]";
    }
    return "";
  };
  knob.allowed = [](const ConfigSupport& s) -> std::string {
    return (s.checkpoint_content_subsets ? "any of " : "all of ") + join(s.checkpoint_contents);
  };
  knob.set_unsupported = [=](const ConfigSupport& s, EngineArgs& a) {
    if (s.checkpoint_content_subsets) return false;
    field(a) = {"model"};
    return true;
  };
  return knob;
}

ConfigKnob backend_options_knob() {
  ConfigKnob knob;
  knob.key = "engine.<backend>";
  knob.unsupported_value = [](const ConfigSupport& s, const EngineArgs& a) -> std::string {
    for (const auto& [name, value] : a.engine.backend_options) {
      if (!contains(s.backend_options, name)) return name;
    }
    return "";
  };
  knob.allowed = [](const ConfigSupport& s) {
    return s.backend_options.empty() ? std::string("no options") : join(s.backend_options);
  };
  knob.set_unsupported = [](const ConfigSupport&, EngineArgs& a) {
    a.engine.backend_options["no_such_option"] = int64_t{1};
    return true;
  };
  return knob;
}

std::vector<ConfigKnob> make_knobs() {
  using A = EngineArgs;
  std::vector<ConfigKnob> k;
  k.push_back(dtype_knob(
      "engine.mixed_precision.param_dtype", &ConfigSupport::param_dtypes,
      [](const A& a) { return a.engine.mixed_precision.param_dtype; },
      [](A& a, c10::ScalarType d) { a.engine.mixed_precision.param_dtype = d; }));
  k.push_back(dtype_knob(
      "engine.mixed_precision.reduce_dtype", &ConfigSupport::reduce_dtypes,
      [](const A& a) { return a.engine.mixed_precision.reduce_dtype; },
      [](A& a, c10::ScalarType d) { a.engine.mixed_precision.reduce_dtype = d; }));
  k.push_back(dtype_knob(
      "engine.mixed_precision.buffer_dtype", &ConfigSupport::buffer_dtypes,
      [](const A& a) { return a.engine.mixed_precision.buffer_dtype; },
      [](A& a, c10::ScalarType d) { a.engine.mixed_precision.buffer_dtype = d; }));
  k.push_back(dtype_knob(
      "engine.model_dtype", &ConfigSupport::model_dtypes, [](const A& a) { return a.engine.model_dtype; },
      [](A& a, c10::ScalarType d) { a.engine.model_dtype = d; }));
  k.push_back(scaler_knob());
  k.push_back(hsdp_knob());
  k.push_back(flag_knob("engine.reshard_after_forward", &ConfigSupport::keep_params_after_forward,
                        [](A& a) -> bool& { return a.engine.reshard_after_forward; }, true));
  k.push_back(flag_knob("engine.forward_only", &ConfigSupport::forward_only,
                        [](A& a) -> bool& { return a.engine.forward_only; }, false));
  k.push_back(flag_knob("engine.param_offload", &ConfigSupport::param_offload,
                        [](A& a) -> bool& { return a.engine.param_offload; }, false));
  k.push_back(flag_knob("engine.optimizer_offload", &ConfigSupport::optimizer_offload,
                        [](A& a) -> bool& { return a.engine.optimizer_offload; }, false));
  k.push_back(flag_knob("engine.forward_prefetch", &ConfigSupport::forward_prefetch,
                        [](A& a) -> bool& { return a.engine.forward_prefetch; }, false));
  k.push_back(flag_knob("engine.use_dynamic_bsz", &ConfigSupport::dynamic_bsz,
                        [](A& a) -> bool& { return a.engine.use_dynamic_bsz; }, false));
  k.push_back(flag_knob("engine.entropy_from_logits_with_chunking", &ConfigSupport::unchunked_entropy,
                        [](A& a) -> bool& { return a.engine.entropy_from_logits_with_chunking; }, true));
  k.push_back(flag_knob("model.use_remove_padding", &ConfigSupport::remove_padding,
                        [](A& a) -> bool& { return a.model.use_remove_padding; }, false));
  k.push_back(flag_knob("checkpoint.async_save", &ConfigSupport::async_save,
                        [](A& a) -> bool& { return a.checkpoint.async_save; }, false));
  k.push_back(contents_knob("checkpoint.save_contents",
                            [](A& a) -> std::vector<std::string>& { return a.checkpoint.save_contents; }));
  k.push_back(contents_knob("checkpoint.load_contents",
                            [](A& a) -> std::vector<std::string>& { return a.checkpoint.load_contents; }));
  k.push_back(backend_options_knob());
  return k;
}

}  // namespace

const std::vector<ConfigKnob>& config_knobs() {
  static const std::vector<ConfigKnob> knobs = make_knobs();
  return knobs;
}

void check_config_supported(const ConfigSupport& support, const EngineArgs& args, const std::string& engine) {
  for (const auto& knob : config_knobs()) {
    const std::string value = knob.unsupported_value(support, args);
    if (value.empty()) continue;
    if (knob.key == "engine.<backend>") {
      const std::string key = "engine." + args.engine.strategy + "." + value;
      throw EngineryError(key + " is not an option of engine " + engine, key, knob.allowed(support));
    }
    throw EngineryError(knob.key + " = " + value + " is not implemented by engine " + engine, knob.key,
                        knob.allowed(support));
  }
}

}  // namespace enginery
