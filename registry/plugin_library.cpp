#include "registry/plugin_library.h"

#include <dlfcn.h>

#include <boost/dll/shared_library.hpp>
#include <cstring>
#include <mutex>
#include <vector>

#include "host_api/error.h"
#include "host_api/version.h"
#include "registry/header_fingerprint.h"

namespace enginery {
namespace {

using Library = boost::dll::shared_library;

std::mutex& libraries_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Deliberately leaked: destroying it at exit would dlclose every plugin after LibTorch's own teardown began.
std::vector<std::shared_ptr<Library>>& opened_libraries() {
  static auto* libraries = new std::vector<std::shared_ptr<Library>>();
  return *libraries;
}

// dlerror()'s text names the library and the cause (missing dependency, undefined symbol, not an ELF file);
// Boost.DLL's own error after a failed dlopen is a fixed errno ("Bad file descriptor") that says neither.
std::string dl_error(const std::exception& fallback) {
  const char* text = dlerror();
  return text ? text : fallback.what();
}

}  // namespace

void check_contract_version(int version, const std::string& where, const std::string& who) {
  if (version == kContractVersion) return;
  std::string what = who + " was built against contract " + std::to_string(version) + ", this host implements " +
                     std::to_string(kContractVersion);
  if (version == 2) {
    what += ": a 2.x plugin; rebuild it against enginery's contract 3 (docs/PLUGIN_GUIDE.md, \"Migrating from 2.x\")";
  } else if (version < kContractVersion) {
    what += ": rebuild it against this installation";
  } else {
    what += ": this host is older than the plugin";
  }
  throw EngineryError(what, where, std::to_string(kContractVersion));
}

OpenedLibrary open_plugin_library(const std::filesystem::path& library, const std::string& where) {
  // RTLD_NODELETE as well: even a handle someone else closes never unmaps the plugin's code.
  auto mode = static_cast<boost::dll::load_mode::type>(boost::dll::load_mode::rtld_now |
                                                       boost::dll::load_mode::rtld_local | RTLD_NODELETE);
  std::shared_ptr<Library> handle;
  dlerror();  // clear a stale message
  try {
    handle = std::make_shared<Library>(library, mode);
  } catch (const std::exception& e) {
    throw EngineryError("cannot load " + library.string() + ": " + dl_error(e), where,
                        "a shared library built for this host");
  }
  {
    std::lock_guard<std::mutex> lock(libraries_mutex());
    opened_libraries().push_back(handle);
  }
  if (!handle->has(ENGINERY_PLUGIN_ENTRY_SYMBOL)) {
    throw EngineryError(library.string() + " has no entry point '" ENGINERY_PLUGIN_ENTRY_SYMBOL "'", where,
                        "a library defining it with ENGINERY_DEFINE_PLUGIN");
  }
  auto entry = handle->get<const PluginInfo*()>(ENGINERY_PLUGIN_ENTRY_SYMBOL);
  OpenedLibrary opened;
  opened.handle = handle;
  opened.info = entry();
  if (!opened.info) throw EngineryError(ENGINERY_PLUGIN_ENTRY_SYMBOL "() returned null", where);
  return opened;
}

void check_plugin_info(const PluginInfo& info, const PluginManifest& manifest) {
  const std::string where = "plugin '" + manifest.name + "' (" + manifest.library_path().string() + ")";
  // Read first, where a 2.x library kept its major version: nothing else of a library built for another contract
  // is read.
  check_contract_version(info.contract_version, where, "the library");
  if (info.contract_version != manifest.api_version) {
    throw EngineryError("the library reports contract " + std::to_string(info.contract_version) +
                            " but its manifest declares api_version \"" + std::to_string(manifest.api_version) + "\"",
                        manifest.api_version_where, std::to_string(info.contract_version));
  }
  const std::string host = host_header_fingerprint();
  if (!info.header_fingerprint || host != info.header_fingerprint) {
    throw EngineryError(std::string("built against other enginery headers (fingerprint ") +
                            (info.header_fingerprint ? info.header_fingerprint : "(null)") + ", this host's " + host +
                            "): rebuild it against this installation; a struct that changed under it (such as "
                            "models::HeadOptions) would be read wrongly",
                        where, host);
  }
  if (!info.torch_version || host_torch_version() != info.torch_version) {
    throw EngineryError(std::string("LibTorch version mismatch: the plugin was built with ") +
                            (info.torch_version ? info.torch_version : "(null)") + ", the host with " +
                            host_torch_version(),
                        where, host_torch_version());
  }
  if (info.cxx11_abi != host_cxx11_abi()) {
    throw EngineryError("C++ ABI mismatch: the plugin was built with _GLIBCXX_USE_CXX11_ABI=" +
                            std::to_string(info.cxx11_abi) + ", the host with " + std::to_string(host_cxx11_abi()),
                        where, std::to_string(host_cxx11_abi()));
  }
  if (!info.plugin_name || manifest.name != info.plugin_name) {
    throw EngineryError(std::string("the library calls itself '") + (info.plugin_name ? info.plugin_name : "(null)") +
                            "' but its manifest is named '" + manifest.name + "'",
                        where, manifest.name);
  }
  if (!info.register_engines) throw EngineryError("PluginInfo::register_engines is null", where);
}

std::string host_torch_version() { return ENGINERY_TORCH_VERSION_STRING; }
int host_cxx11_abi() { return _GLIBCXX_USE_CXX11_ABI; }

size_t opened_plugin_library_count() {
  std::lock_guard<std::mutex> lock(libraries_mutex());
  return opened_libraries().size();
}

}  // namespace enginery
