#pragma once
// The one versioned C entry point of a plugin library, `extern "C" const enginery::PluginInfo*
// enginery_plugin_info()` (in the style of LLVM's llvmGetPassPluginInfo). The loader reads the returned struct, checks the contract version, the header fingerprint, LibTorch version and
// C++ ABI against its own, and only then calls register_engines. Use ENGINERY_DEFINE_PLUGIN to define it.
#include "host_api/base_engine.h"
#include "host_api/version.h"

namespace enginery {

struct EngineKey {
  std::string model_type;  // "language_model", "value_model"
  std::string backend;     // "fsdp", "fsdp2", "veomni", ...
  std::string device;      // "cpu", "cuda"
  bool operator<(const EngineKey& o) const;
  bool operator==(const EngineKey& o) const;
  std::string str() const;  // "(model_type, backend, device)"
};

using EngineFactory = std::function<std::shared_ptr<BaseEngine>(const EngineArgs& args)>;

// Everything an engine declares about itself, once, where the host reads it (docs/ARCHITECTURE.md, "The contract").
struct EngineTraits {
  ConfigSupport config;
  Capabilities capabilities;
};

// Handed to a plugin's register_engines. Implemented by the registry.
class Registrar {
 public:
  virtual ~Registrar();
  virtual void register_engine(const EngineKey& key, EngineFactory factory, EngineTraits traits) = 0;
};

// Plain C layout, read before anything else of the library is trusted; contract_version first, as 2.x's major was.
struct PluginInfo {
  int contract_version;            // kContractVersion the plugin was compiled with
  const char* plugin_name;
  const char* header_fingerprint;  // of the enginery headers it was compiled against (enginery_add_plugin)
  const char* torch_version;       // "MAJOR.MINOR.PATCH" of the LibTorch the plugin was compiled against
  int cxx11_abi;                   // _GLIBCXX_USE_CXX11_ABI the plugin was compiled with
  void (*register_engines)(Registrar& registrar);
};

}  // namespace enginery

// Defined by enginery_add_plugin in a generated source of the plugin (cmake/EngineryPlugin.cmake).
extern "C" const char enginery_header_fingerprint[];

#define ENGINERY_PLUGIN_ENTRY_SYMBOL "enginery_plugin_info"

#define ENGINERY_STRINGIFY_IMPL(x) #x
#define ENGINERY_STRINGIFY(x) ENGINERY_STRINGIFY_IMPL(x)
#define ENGINERY_TORCH_VERSION_STRING \
  ENGINERY_STRINGIFY(TORCH_VERSION_MAJOR) "." ENGINERY_STRINGIFY(TORCH_VERSION_MINOR) "." ENGINERY_STRINGIFY(TORCH_VERSION_PATCH)

// Defines the entry point. `register_fn` is a function `void (enginery::Registrar&)`.
#define ENGINERY_DEFINE_PLUGIN(name, register_fn)                                                       \
  extern "C" __attribute__((visibility("default"))) const ::enginery::PluginInfo* enginery_plugin_info() { \
    static const ::enginery::PluginInfo info{::enginery::kContractVersion, name, enginery_header_fingerprint,  \
                                             ENGINERY_TORCH_VERSION_STRING, _GLIBCXX_USE_CXX11_ABI, &register_fn}; \
    return &info;                                                                                               \
  }
