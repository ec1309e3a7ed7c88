#include "plugin/fsdp/backend_options.h"

#include "engine_driver/mode_offload.h"
#include "host_api/error.h"
#include "plugin/fsdp/ulysses.h"
#include "support/torch_compat.h"

namespace enginery {
namespace fsdp {
namespace {

bool host_step_wanted(const EngineConfig& engine) {
  const std::string where = backend_option<std::string>(engine, kOffloadStep, "device");
  if (where == "device") return false;
  const std::string key = option_key(engine, kOffloadStep);
  if (where != "host") throw EngineryError("unknown value '" + where + "'", key, "device, host");
  if (!engine.param_offload || !engine.optimizer_offload) {
    throw EngineryError("a host optimizer step needs the parameters and the optimizer state on the host", key,
                        "host with engine.param_offload = true and engine.optimizer_offload = true, else device");
  }
  return true;
}

// Only those GEMMs and the activations they save change precision; the fp32 masters, the bf16 gather, fp32
// reductions and AdamW do not (docs/ARCHITECTURE.md, "FP8 matmuls").
models::Fp8Recipe fp8_wanted(const EngineArgs& args, const torch::Device& device) {
  const std::string recipe = backend_option<std::string>(args.engine, kFp8, "off");
  if (recipe == "off") return models::Fp8Recipe::kOff;
  const std::string key = option_key(args.engine, kFp8);
  if (recipe != "tensorwise" && recipe != "delayed") {
    throw EngineryError("unknown value '" + recipe + "'", key, "off, tensorwise, delayed");
  }
  if (!compat::fp8_gemm_device(device)) {
    throw EngineryError("FP8 matmuls need a CUDA device of compute capability 8.9 or later; this engine runs on " +
                            device.str(),
                        key, "off");
  }
  if (args.engine.mixed_precision.param_dtype != c10::kBFloat16) {
    throw EngineryError("FP8 matmuls replace bf16 GEMMs; set engine.mixed_precision.param_dtype = \"bf16\"", key,
                        "off");
  }
  return recipe == "delayed" ? models::Fp8Recipe::kDelayed : models::Fp8Recipe::kTensorwise;
}

}  // namespace

std::string option_key(const EngineConfig& engine, const std::string& name) {
  return "engine." + engine.strategy + "." + name;
}

BackendOptions BackendOptions::read(const EngineArgs& args, const torch::Device& device) {
  BackendOptions o;
  o.host_optimizer_step = host_step_wanted(args.engine);
  o.offload_outside_modes = offloads_outside_modes(args.engine);
  o.fp8 = fp8_wanted(args, device);
  o.recompute = models::recompute_policy(args.model.enable_gradient_checkpointing,
                                         backend_option<std::string>(args.engine, kCheckpointingPolicy, "layer"),
                                         option_key(args.engine, kCheckpointingPolicy));
  o.ulysses_size = ulysses_size_wanted(args);
  return o;
}

std::vector<std::string> BackendOptions::names() {
  return {kOffloadStep, kOffloadOutsideModes, kFp8, kCheckpointingPolicy, kUlyssesSize};
}

}  // namespace fsdp
}  // namespace enginery
