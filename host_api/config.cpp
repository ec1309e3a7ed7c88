#include "host_api/config.h"

#include <string>
#include <type_traits>
#include <variant>

#include "host_api/error.h"

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

namespace {
template <typename T>
const char* type_name();
template <>
const char* type_name<bool>() { return "a boolean (true, false)"; }
template <>
const char* type_name<int64_t>() { return "an integer"; }
template <>
const char* type_name<double>() { return "a number"; }
template <>
const char* type_name<std::string>() { return "a string"; }

// The value as its config wrote it, quoted when it is text: the error shows what was given.
std::string as_written(const ScalarValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<V, std::string>) return "'" + v + "'";
        else return std::to_string(v);
      },
      value);
}
}  // namespace

template <typename T>
T backend_option(const EngineConfig& engine, const std::string& key, T fallback) {
  const auto it = engine.backend_options.find(key);
  if (it == engine.backend_options.end()) return fallback;
  if (const T* value = std::get_if<T>(&it->second)) return *value;
  if constexpr (std::is_same_v<T, double>) {
    if (const int64_t* whole = std::get_if<int64_t>(&it->second)) return static_cast<double>(*whole);
  }
  throw EngineryError(as_written(it->second) + " has the wrong type", "engine." + engine.strategy + "." + key, type_name<T>());
}

template bool backend_option<bool>(const EngineConfig&, const std::string&, bool);
template int64_t backend_option<int64_t>(const EngineConfig&, const std::string&, int64_t);
template double backend_option<double>(const EngineConfig&, const std::string&, double);
template std::string backend_option<std::string>(const EngineConfig&, const std::string&, std::string);

}  // namespace enginery
