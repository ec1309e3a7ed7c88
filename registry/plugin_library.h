#pragma once
// Opening a plugin's shared library and checking what its entry point reports. Libraries are never unloaded
// (LibTorch plugins crash on unload): every opened library, accepted or not, stays in a process-wide list.
#include <filesystem>
#include <memory>
#include <string>

#include "host_api/plugin_api.h"
#include "registry/manifest.h"

namespace enginery {

struct OpenedLibrary {
  std::shared_ptr<const void> handle;  // the dlopen handle (never closed); engines hold it
  const PluginInfo* info = nullptr;
};

// dlopen with RTLD_NOW | RTLD_LOCAL, then reads enginery_plugin_info(). Throws EngineryError at `where`; a failed
// dlopen quotes dlerror().
OpenedLibrary open_plugin_library(const std::filesystem::path& library, const std::string& where);

// The contract version equal to the host's and the manifest's, the header fingerprint, LibTorch version and C++ ABI
// equal to the host's, and the plugin name equal to the manifest's.
void check_plugin_info(const PluginInfo& info, const PluginManifest& manifest);

// The version check the loader runs on the manifest alone, before opening anything.
void check_contract_version(int version, const std::string& where, const std::string& who);

// Build facts of the host; the loader compares a plugin's PluginInfo with them.
std::string host_torch_version();
int host_cxx11_abi();

// How many libraries this process has opened as plugins (they are all still loaded).
size_t opened_plugin_library_count();

}  // namespace enginery
