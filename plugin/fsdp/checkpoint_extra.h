#pragma once
// Random-number generator states for exact resume: the CPU generator and, on CUDA, the device's, as hex text
// (a rank's extra_rank_<r>.json).
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace enginery {
namespace fsdp {
namespace ckpt {

nlohmann::json capture_rng(const torch::Device& device);
// Restores what capture_rng saved; a CUDA state is restored only on a CUDA device. Throws naming `where`.
void restore_rng(const nlohmann::json& states, const torch::Device& device, const std::string& where);

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
