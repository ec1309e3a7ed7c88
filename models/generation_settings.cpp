#include "models/generation_settings.h"

#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "host_api/error.h"
#include "host_api/config.h"
#include "engine_driver/precision.h"
#include "models/causal_lm.h"
#include "models/model_factory.h"

namespace enginery {
namespace models {
namespace {

std::string text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

void check_sampling_values(const SamplingParams& p, const GenerationSettingNames& names) {
  if (p.max_new_tokens < 1) {
    throw EngineryError(names.max_new_tokens.key + " = " + std::to_string(p.max_new_tokens) + " new tokens",
                        names.max_new_tokens.where, ">= 1");
  }
  if (p.greedy) return;
  if (!std::isfinite(p.temperature) || p.temperature < kMinTemperature) {
    throw EngineryError(names.temperature.key + " = " + text(p.temperature) +
                            " cannot be sampled from (logits / temperature overflows, softmax gives NaN)",
                        names.temperature.where,
                        "a finite number >= " + text(kMinTemperature) + " (lower is the argmax: greedy decoding)");
  }
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) {
    throw EngineryError(names.top_p.key + " = " + text(p.top_p) + " keeps no token", names.top_p.where,
                        "(0, 1]; 1 = off");
  }
  if (p.top_k < -1) {
    throw EngineryError(names.top_k.key + " = " + std::to_string(p.top_k) + " is not a token count",
                        names.top_k.where, "-1 or 0 (off), or >= 1");
  }
}

void check_generation_settings(const SamplingParams& p, const GenerationTarget& t,
                               const GenerationSettingNames& names) {
  check_sampling_values(p, names);
  // Compared without adding, so a max_new_tokens near INT64_MAX cannot wrap around.
  if (t.max_positions > 0 && t.longest_prompt > 0 && p.max_new_tokens > t.max_positions - t.longest_prompt) {
    throw EngineryError(names.max_new_tokens.key + " = " + std::to_string(p.max_new_tokens) + " after a prompt of " +
                            std::to_string(t.longest_prompt) + " tokens (" + t.prompt_where +
                            ") exceeds max_position_embeddings = " + std::to_string(t.max_positions) + " of " +
                            t.model,
                        names.max_new_tokens.where,
                        t.max_positions > t.longest_prompt
                            ? "1.." + std::to_string(t.max_positions - t.longest_prompt)
                            : std::string("none: the prompt alone fills max_position_embeddings; shorten it"));
  }
  check_dtype_on_device(t.dtype, t.device, t.model_type, names.dtype);
}

void check_dtype_on_device(c10::ScalarType dtype, const c10::Device& device, const std::string& model_type,
                           const SettingName& name) {
  const std::string dtype_name = PrecisionType::to_str(dtype);
  if (device.is_cuda() && !torch::cuda::is_available()) {
    throw EngineryError(name.key + " = " + dtype_name + " would run on cuda, and no CUDA device is available",
                        name.where, "the device set to cpu, or a machine with a CUDA GPU");
  }
  ModelConfig probe;
  probe.path = "builtin:" + (model_type.empty() ? std::string("qwen2") : model_type) + "-tiny";
  probe.override_dtype = dtype;
  try {
    BuildOptions options;
    options.device = device;
    auto model = std::dynamic_pointer_cast<CausalLM>(build_model(probe, "language_model", options));
    SamplingParams params;
    params.max_new_tokens = 2;
    const torch::Tensor prompt = torch::ones({1, 2}, torch::kLong);
    generate(*model, prompt, prompt, params);
  } catch (const EngineryError&) {
    throw;
  } catch (const c10::Error& e) {
    throw EngineryError(name.key + " = " + dtype_name + " cannot generate on " + device.str() +
                            " with this LibTorch: " + e.what_without_backtrace(),
                        name.where, "a dtype the device computes in (fp32 everywhere)");
  }
}

}  // namespace models
}  // namespace enginery
