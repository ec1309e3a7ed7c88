#pragma once
// [Note: failures are agreed] A rank that throws inside a collective protocol (checkpoint save and load, the HF
// export) would leave the others waiting in its next collective. So each step's error, "" on success, becomes a flag
// all ranks agree on, and then every rank throws together: the failing one its own message, the others one naming
// the rank that failed (plugin/fsdp/CHECKPOINT.md).
#include <torch/types.h>

#include <functional>
#include <string>

#include "plugin/fsdp/collectives.h"

namespace enginery {
namespace fsdp {

// The message of what `step` threw, "" when it succeeded.
std::string error_of(const std::function<void()>& step);

// Collective over `world` (tensors on `device`): returns when no rank has an error; else runs `on_failure` on every
// rank, waits for all of them, and throws EngineryError naming `stage` and this rank.
void agree_or_throw(const Collectives& world, const torch::Device& device, const std::string& error,
                    const std::string& stage, const std::function<void()>& on_failure);

}  // namespace fsdp
}  // namespace enginery
