#pragma once
// The one versioned C entry point of a plugin library (in the style of LLVM's llvmGetPassPluginInfo):
//
//   extern "C" const enginery::PluginInfo* enginery_plugin_info();
//
// The loader reads the returned struct, checks the API version, LibTorch version and C++ ABI against its own,
// and only then calls register_engines. Use ENGINERY_DEFINE_PLUGIN to define it.
#include <functional>
#include <memory>
#include <string>

#include "host_api/base_engine.h"
#include "host_api/config_support.h"
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

// Handed to a plugin's register_engines. Implemented by the registry.
class Registrar {
 public:
  virtual ~Registrar();
  // `support` declares which configuration the engine honours; the registry refuses to call `factory` with a
  // configuration beyond it (host_api/config_support.h).
  virtual void register_engine(const EngineKey& key, EngineFactory factory, ConfigSupport support) = 0;
};

// Plain C layout so the loader can read it before trusting anything else in the library.
struct PluginInfo {
  int api_version_major;
  int api_version_minor;
  const char* plugin_name;
  const char* torch_version;  // "MAJOR.MINOR.PATCH" of the LibTorch the plugin was compiled against
  int cxx11_abi;              // _GLIBCXX_USE_CXX11_ABI the plugin was compiled with
  void (*register_engines)(Registrar& registrar);
};

// Build facts of the current translation unit; the host compares a plugin's with its own.
std::string host_torch_version();
int host_cxx11_abi();

}  // namespace enginery

#define ENGINERY_PLUGIN_ENTRY_SYMBOL "enginery_plugin_info"

#define ENGINERY_STRINGIFY_IMPL(x) #x
#define ENGINERY_STRINGIFY(x) ENGINERY_STRINGIFY_IMPL(x)
#define ENGINERY_TORCH_VERSION_STRING \
  ENGINERY_STRINGIFY(TORCH_VERSION_MAJOR) "." ENGINERY_STRINGIFY(TORCH_VERSION_MINOR) "." ENGINERY_STRINGIFY(TORCH_VERSION_PATCH)

// Defines the entry point. `register_fn` is a function `void (enginery::Registrar&)`.
#define ENGINERY_DEFINE_PLUGIN(name, register_fn)                                                    \
  extern "C" __attribute__((visibility("default"))) const ::enginery::PluginInfo* enginery_plugin_info() { \
    static const ::enginery::PluginInfo info{::enginery::kApiVersionMajor, ::enginery::kApiVersionMinor,   \
                                             name, ENGINERY_TORCH_VERSION_STRING, _GLIBCXX_USE_CXX11_ABI,   \
                                             &register_fn};                                                 \
    return &info;                                                                                           \
  }
