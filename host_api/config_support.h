#pragma once
// Which configuration an engine honours (docs/ARCHITECTURE.md, "Configuration"). Every engine registers one
// ConfigSupport with its factory; the registry refuses to build an engine when a key is set to a value the engine
// does not implement, naming the key, the engine and what it does support. A key is never accepted and ignored.
//
// A value equal to the default of host_api/config.h is what every engine implements, so only departures from the
// defaults are checked (engine_driver/config_checks.h holds the checks).
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
  // checkpoint.save_contents / load_contents: the items understood, and whether a subset of the default
  // {model, optimizer, extra} is honoured (false: only the default list is accepted).
  std::vector<std::string> checkpoint_contents = {"model", "optimizer", "extra"};
  bool checkpoint_content_subsets = false;
  std::vector<std::string> backend_options;  // key names accepted in [engine.<backend>]
};

}  // namespace enginery
