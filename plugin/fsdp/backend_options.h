#pragma once
// [engine.<backend>] of the FSDP engines (docs/ARCHITECTURE.md, "Configuration"), read and checked once, when the
// engine is built, before any work: a bad value is refused naming engine.<backend>.<key> and what is allowed.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "models/layers.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

inline constexpr const char* kOffloadStep = "offload_step";
inline constexpr const char* kFp8 = "fp8";
inline constexpr const char* kCheckpointingPolicy = "gradient_checkpointing_policy";

// "engine.<backend>.<name>": how errors name an option.
ENGINERY_FSDP_API std::string option_key(const EngineConfig& engine, const std::string& name);

struct ENGINERY_FSDP_API BackendOptions {
  // offload_step = "device" | "host": where the offloaded optimizer step runs (host: AdamW::step_on_host; needs
  // engine.param_offload and engine.optimizer_offload).
  bool host_optimizer_step = false;
  // offload_outside_modes = true | false (engine_driver/mode_offload.h).
  bool offload_outside_modes = false;
  // fp8 = "off" | "tensorwise" | "delayed" (models::Fp8Recipe): the decoder layers' projections as FP8 GEMMs; needs
  // a CUDA device of compute capability 8.9+ and bf16 compute.
  models::Fp8Recipe fp8 = models::Fp8Recipe::kOff;
  // gradient_checkpointing_policy = "layer" | "mlp" (models::Recompute), with model.enable_gradient_checkpointing.
  models::Recompute recompute = models::Recompute::kNothing;
  // ulysses_sequence_parallel_size (ulysses.h).
  int64_t ulysses_size = 1;

  static BackendOptions read(const EngineArgs& args, const torch::Device& device);
  // Every key above, for ConfigSupport::backend_options.
  static std::vector<std::string> names();
};

}  // namespace fsdp
}  // namespace enginery
