// [engine.<backend>] fp8 (docs/ARCHITECTURE.md, "FP8 matmuls"): the decoder layers' projections as FP8 GEMMs
// (models/fp8_linear.h), opt-in. Everything the engine keeps (fp32 masters, the bf16 gather, fp32 reductions,
// AdamW) is unchanged; only those GEMMs and the activations they save change precision.
#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "support/torch_compat.h"

namespace enginery {
namespace fsdp {

// "off" (the default), "tensorwise" or "delayed" (models::Fp8Recipe). Checked when the engine is built, before any
// work: a build or device that cannot run FP8 GEMMs, or a compute dtype other than bf16, is refused naming the key.
models::Fp8Recipe FSDPEngine::fp8_wanted(const EngineArgs& args, const torch::Device& device) {
  const std::string recipe = backend_option<std::string>(args.engine, "fp8", "off");
  if (recipe == "off") return models::Fp8Recipe::kOff;
  const std::string key = "engine." + args.engine.strategy + ".fp8";
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

}  // namespace fsdp
}  // namespace enginery
