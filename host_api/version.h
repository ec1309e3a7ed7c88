#pragma once
// The contract's one version (docs/ARCHITECTURE.md, "Version compatibility"): a plugin loads only when it reports
// this number and its PluginInfo::header_fingerprint is the host's. 2.x: docs/PLUGIN_GUIDE.md, "Migrating from 2.x".

namespace enginery {

constexpr int kContractVersion = 3;

}  // namespace enginery
