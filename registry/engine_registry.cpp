#include "registry/engine_registry.h"

#include <set>

#include "engine_driver/capability_names.h"
#include "engine_driver/config_checks.h"
#include "engine_driver/engine_access.h"
#include "host_api/error.h"

namespace enginery {

std::string EngineOrigin::str() const {
  std::string out = "plugin '" + plugin + "'";
  if (!manifest.empty()) out += " (" + manifest + ")";
  return out;
}

void EngineRegistry::check_free(const EngineRegistration& registration) const {
  auto it = entries_.find(registration.key);
  if (it != entries_.end()) {
    throw EngineryError("engine " + registration.key.str() + " of " + registration.origin.str() +
                            " is already registered by " + it->second.origin.str(),
                        registration.origin.manifest.empty() ? registration.origin.plugin : registration.origin.manifest,
                        "one plugin per (model_type, backend, device)");
  }
  if (!registration.factory) {
    throw EngineryError("engine " + registration.key.str() + " has an empty factory", registration.origin.str());
  }
}

void EngineRegistry::register_engine(EngineRegistration registration) {
  std::vector<EngineRegistration> one;
  one.push_back(std::move(registration));
  register_all(std::move(one));
}

void EngineRegistry::register_all(std::vector<EngineRegistration> registrations) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<EngineKey, const EngineRegistration*> batch;
  for (const auto& registration : registrations) {
    check_free(registration);
    auto [it, inserted] = batch.emplace(registration.key, &registration);
    if (!inserted) {
      throw EngineryError("engine " + registration.key.str() + " is registered twice, by " +
                              it->second->origin.str() + " and by " + registration.origin.str(),
                          registration.origin.str(), "one registration per (model_type, backend, device)");
    }
  }
  for (auto& registration : registrations) {
    entries_.emplace(registration.key, Entry{std::move(registration.factory), std::move(registration.origin),
                                             std::move(registration.keep_alive), std::move(registration.traits)});
  }
}

bool EngineRegistry::has(const EngineKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.count(key) > 0;
}

const EngineOrigin* EngineRegistry::origin(const EngineKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second.origin;
}

void EngineRegistry::throw_unknown(const EngineKey& key) const {
  if (entries_.empty()) {
    throw EngineryError("no engine is registered, so " + key.str() + " cannot be created", "engine registry",
                        "nothing: load a plugin (enginery plugins shows the search path and any rejected plugin)");
  }
  // Name the first part of the key that matches nothing, and list what is registered at that level.
  std::string part = "model_type '" + key.model_type + "'";
  auto matches = [&](const EngineKey& k) { return k.model_type == key.model_type; };
  bool any_model = false, any_backend = false;
  for (const auto& [k, entry] : entries_) {
    any_model = any_model || k.model_type == key.model_type;
    any_backend = any_backend || (k.model_type == key.model_type && k.backend == key.backend);
  }
  std::function<bool(const EngineKey&)> listed = [](const EngineKey&) { return true; };
  if (any_backend) {
    part = "device '" + key.device + "' for " + key.model_type + " / " + key.backend;
    listed = [&](const EngineKey& k) { return k.model_type == key.model_type && k.backend == key.backend; };
  } else if (any_model) {
    part = "backend '" + key.backend + "' for model_type " + key.model_type;
    listed = matches;
  }
  std::string allowed;
  for (const auto& [k, entry] : entries_) {
    if (!listed(k)) continue;
    if (!allowed.empty()) allowed += "; ";
    allowed += k.str() + " from " + entry.origin.str();
  }
  throw EngineryError("unknown " + part + ", cannot create " + key.str(), "engine registry", allowed);
}

EngineRegistry::Entry EngineRegistry::entry_of(const EngineKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) throw_unknown(key);
  return it->second;
}

void EngineRegistry::check_config(const EngineKey& key, const EngineArgs& args) const {
  const Entry entry = entry_of(key);
  check_config_supported(entry.traits.config, args, key.str() + " of " + entry.origin.str());
}

std::shared_ptr<BaseEngine> EngineRegistry::create(const EngineKey& key, const EngineArgs& args) const {
  const Entry entry = entry_of(key);
  // The key decides what is built, so the factory never sees a model_type or device that disagrees with it.
  EngineArgs keyed = args;
  keyed.model_type = key.model_type;
  keyed.device = key.device;
  check_config_supported(entry.traits.config, keyed, key.str() + " of " + entry.origin.str());
  std::shared_ptr<BaseEngine> engine = entry.factory(keyed);
  if (!engine) throw EngineryError("the factory of " + key.str() + " returned no engine", entry.origin.str());
  EngineAccess::declared(*engine) = entry.traits.capabilities;
  BaseEngine* raw = engine.get();
  // The engine dies first, then its library's last handle: the engine's code lives in that library.
  return std::shared_ptr<BaseEngine>(raw, [engine = std::move(engine), library = entry.keep_alive](BaseEngine*) mutable {
    engine.reset();
    library.reset();
  });
}

std::shared_ptr<BaseEngine> EngineRegistry::create(const std::string& model_type, const std::string& backend,
                                                   const std::string& device, const EngineArgs& args) const {
  return create(EngineKey{model_type, backend, device}, args);
}

std::vector<EngineInfo> EngineRegistry::list() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<EngineInfo> out;
  for (const auto& [key, entry] : entries_) {
    out.push_back({key, entry.origin, capability_names(entry.traits, key.device), entry.traits.config,
                   entry.traits.capabilities});
  }
  return out;
}

}  // namespace enginery
