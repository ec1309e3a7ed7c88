#pragma once
// Which configuration an engine honours (docs/ARCHITECTURE.md, "Configuration"). Every engine registers one
// ConfigSupport with its factory; the registry refuses to build an engine when a key is set to a value the engine
// does not implement, naming the key, the engine and what it does support. A key is never accepted and ignored.
//
// A value equal to the default of host_api/config.h is what every engine implements, so only departures from the
// defaults are checked. The same table of knobs drives the conformance suite: for every knob an engine does not
// declare, it sets the knob's example value and expects the refusal.
#include <c10/core/ScalarType.h>

#include <functional>
#include <string>
#include <vector>

#include "host_api/config.h"

namespace enginery {

struct EngineArgs;

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

// One configurable behaviour an engine may or may not implement.
struct ConfigKnob {
  std::string key;  // the dotted config key, e.g. "engine.param_offload"
  // Empty when `args` asks for nothing beyond what `support` declares; else the offending value as text.
  std::function<std::string(const ConfigSupport& support, const EngineArgs& args)> unsupported_value;
  std::function<std::string(const ConfigSupport& support)> allowed;  // what the engine does support, as text
  // Changes `args` so that it asks for this knob beyond the defaults (for conformance), or returns false when
  // `support` leaves no value to ask for.
  std::function<bool(const ConfigSupport& support, EngineArgs& args)> set_unsupported;
};

// Every knob of host_api/config.h that an engine may leave out.
const std::vector<ConfigKnob>& config_knobs();

// Throws EngineryError when `args` sets a key to a value `support` lacks:
//   "<key>: <key> = <value> is not implemented by engine <engine> (allowed: <what it supports>)".
void check_config_supported(const ConfigSupport& support, const EngineArgs& args, const std::string& engine);

}  // namespace enginery
