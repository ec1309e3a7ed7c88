#pragma once
// The crash probe: before a plugin's library is opened in the host, a short-lived child process opens it, reads its
// entry point and runs its registration into a throwaway registrar, then exits. A plugin that dies doing so (a
// segfault, an abort, exit()) or hangs is refused with what happened, and the host never runs that code
// (docs/ARCHITECTURE.md, "Plugins and packaging").
//
// fork() without exec: the child only dlopens, registers and _exits, which glibc supports even when the parent
// already has threads (it resets the loader's and malloc's locks in the child). Probe at discovery, before process
// groups and their threads exist, where possible.
#include <chrono>
#include <filesystem>
#include <string>

#include "registry/manifest.h"

namespace enginery {

// How long a probe may take before it is killed and the plugin refused as hanging.
constexpr std::chrono::seconds kPluginProbeTimeout{60};

// Throws EngineryError at `where` when the probe did not finish cleanly: it names the signal ("SIGSEGV"), the exit
// status or the timeout. Errors the host would report itself (no entry point, wrong API version, register_engines
// threw) pass the probe: the host reports them with their full text.
void probe_plugin(const PluginManifest& manifest, const std::filesystem::path& library, const std::string& where,
                  std::chrono::milliseconds timeout = kPluginProbeTimeout);

// "SIGSEGV", "SIGABRT", ..., or "signal N" for one without a common name.
std::string signal_name(int signal);

}  // namespace enginery
