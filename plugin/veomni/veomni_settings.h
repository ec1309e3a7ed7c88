#pragma once
// VeOmni's own knobs, read from EngineArgs.engine.backend_options (the `[engine.veomni]` TOML table), and how they
// combine with the host's precision knobs (README.md).
#include <string>
#include <vector>

#include "host_api/config.h"

namespace enginery {
namespace veomni {

struct VeOmniSettings {
  // true: parameters sharded at rest and resharded after each unit's forward (ZeRO-3, FSDP2 fully_shard);
  // false: sharded at rest but kept gathered from a unit's forward until the backward is done (ZeRO-2 style,
  // FSDP2 reshard_after_forward=False): one gather per step instead of two.
  bool enable_full_shard = true;
  // true: fp32 master weights, compute in engine.mixed_precision.param_dtype (bf16 default, or fp32);
  // false: bf16 weights: the master weights are rounded to bf16 after init and after every optimizer step,
  // compute in bf16.
  bool mixed_precision = true;
};

// The keys [engine.veomni] takes: its own two, then FSDPEngine's (fsdp::BackendOptions, which reads and checks them)
// but Ulysses: VeOmni's build path makes no sequence groups.
std::vector<std::string> option_names();

// Throws EngineryError naming `engine.veomni.<key>` and the allowed values for an unknown key or a bad value.
VeOmniSettings parse_settings(const EngineConfig& engine);

}  // namespace veomni
}  // namespace enginery
