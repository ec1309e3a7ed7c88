#pragma once
// EngineRegistry: engine factories keyed by (model_type, backend, device), each remembering where it came from so
// every error can name the plugin and manifest (docs/ARCHITECTURE.md, "Plugins and packaging").
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "host_api/config_support.h"
#include "host_api/plugin_api.h"

namespace enginery {

struct EngineOrigin {
  std::string plugin;    // plugin name, or what registered it when not a plugin
  std::string manifest;  // path of its plugin.toml; empty when not from a plugin
  std::string str() const;  // "plugin 'name' (path/plugin.toml)"
};

struct EngineRegistration {
  EngineKey key;
  EngineFactory factory;
  EngineOrigin origin;
  // Whatever must outlive every engine the factory makes (the plugin's library). Each created engine holds it.
  std::shared_ptr<const void> keep_alive;
  EngineTraits traits;  // what the engine declared: create() refuses a configuration beyond traits.config
};

struct EngineInfo {
  EngineKey key;
  EngineOrigin origin;
  std::vector<std::string> capabilities;  // traits' words (engine_driver/capability_names.h)
  ConfigSupport support;
  Capabilities declared;
};

class EngineRegistry {
 public:
  // Throws EngineryError naming both origins when the key is taken.
  void register_engine(EngineRegistration registration);
  // All or nothing: when any key is taken (or repeated in `registrations`) it throws and registers none.
  void register_all(std::vector<EngineRegistration> registrations);

  bool has(const EngineKey& key) const;
  // Where an engine came from, or nullptr.
  const EngineOrigin* origin(const EngineKey& key) const;

  // Builds an engine. args.model_type and args.device are set from the key. A configuration key set to a value the
  // engine does not declare in its ConfigSupport throws before the factory runs, naming the key, the engine and
  // what it supports. The engine learns what it declared (its Capabilities, which the host's loop reads). The
  // returned pointer keeps the engine's library alive. An unknown key throws, listing what is registered for the
  // part that did not match and where each came from.
  std::shared_ptr<BaseEngine> create(const EngineKey& key, const EngineArgs& args) const;
  std::shared_ptr<BaseEngine> create(const std::string& model_type, const std::string& backend,
                                     const std::string& device, const EngineArgs& args) const;

  std::vector<EngineInfo> list() const;  // sorted by key

  // The check create() makes before the factory runs: throws EngineryError when `args` sets a key beyond the
  // engine's ConfigSupport. Lets a host refuse a configuration before it starts any rank.
  void check_config(const EngineKey& key, const EngineArgs& args) const;

 private:
  struct Entry {
    EngineFactory factory;
    EngineOrigin origin;
    std::shared_ptr<const void> keep_alive;
    EngineTraits traits;
  };
  void check_free(const EngineRegistration& registration) const;
  [[noreturn]] void throw_unknown(const EngineKey& key) const;
  Entry entry_of(const EngineKey& key) const;

  mutable std::mutex mutex_;
  std::map<EngineKey, Entry> entries_;
};

}  // namespace enginery
