#pragma once
// A tiny Hugging Face Qwen2 checkpoint (config.json + model.safetensors) written by the suite itself, so the
// get_per_tensor_param check has an independent reference for HF names, shapes and values.
#include <string>

#include "conformance/data.h"

namespace enginery {
namespace conformance {

struct HfFixture {
  std::string dir;
  ParamList tensors;  // what model.safetensors holds, by HF name, fp32
};

// Writes the fixture into `dir` (created). Untied embeddings, so lm_head.weight is a tensor of its own.
HfFixture write_qwen2_fixture(const std::string& dir);

}  // namespace conformance
}  // namespace enginery
