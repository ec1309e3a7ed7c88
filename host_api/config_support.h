#pragma once
// What an engine declares at registration (host_api/plugin_api.h, EngineTraits), read by the host only.
// ConfigSupport: the configuration it honours (docs/ARCHITECTURE.md, "Configuration"); the registry refuses a value
// beyond it by key before the factory runs. The defaults of host_api/config.h are what every engine implements.
#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "host_api/config.h"

namespace enginery {

struct ConfigSupport {
  // engine.mixed_precision.*: the dtypes the engine computes / reduces / keeps buffers in.
  std::vector<c10::ScalarType> param_dtypes = {c10::kBFloat16, c10::kFloat};
  std::vector<c10::ScalarType> reduce_dtypes = {c10::kFloat};
  std::vector<c10::ScalarType> buffer_dtypes = {c10::kFloat};
  std::vector<ScalerMode> scaler_modes = {ScalerMode::kAuto, ScalerMode::kNever};  // engine.grad_scaler.enabled
  std::vector<c10::ScalarType> model_dtypes = {c10::kFloat};  // engine.model_dtype (the master weights)
  bool hsdp = false;                       // engine.fsdp_size from 1 to below the world size
  bool keep_params_after_forward = false;  // engine.reshard_after_forward = false
  bool forward_only = false;               // engine.forward_only = true (an engine without optimizer state)
  bool param_offload = false;              // engine.param_offload
  bool optimizer_offload = false;          // engine.optimizer_offload
  bool forward_prefetch = false;           // engine.forward_prefetch
  bool dynamic_bsz = false;                // engine.use_dynamic_bsz (and engine.max_token_len_per_gpu)
  bool unchunked_entropy = false;          // engine.entropy_from_logits_with_chunking = false
  bool remove_padding = false;             // model.use_remove_padding
  bool async_save = false;                 // checkpoint.async_save
  // checkpoint.*_contents: the items understood; whether a subset of the default is honoured (else only the default)
  std::vector<std::string> checkpoint_contents = CheckpointConfig{}.save_contents;
  bool checkpoint_content_subsets = false;
  std::vector<std::string> backend_options;  // key names accepted in [engine.<backend>]
};

// What the engine does beyond the required operations (docs/ARCHITECTURE.md, "The contract"): undeclared optional
// operations keep BaseEngine's refusing default, undeclared optional inputs are refused by the host's loop.
struct Capabilities {
  // param_dtypes the conformance suite runs on this key's device (a subset of ConfigSupport::param_dtypes).
  std::vector<c10::ScalarType> verified_precisions = {c10::kFloat};
  bool multi_rank = false;             // several data-parallel ranks
  bool checkpoint_same_world = false;  // save_checkpoint / load_checkpoint round trip bitwise
  bool grad_scaler = false;            // fp16 with a GradScaler (grad_scaler() non-null)
  bool temperature = false;            // batch metadata `temperature` divides the logits (host_api/batch.h)
  bool offload = false;                // move_state (BaseEngine::to)
  bool weight_export = false;          // export_weights: one FSDP unit per group
  bool shard_export = false;           // shard_placement, export_shards
  bool train_state = false;            // local_parameters, optimizer_hyperparameters and its setter
};

}  // namespace enginery
