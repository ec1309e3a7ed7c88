#pragma once
// The process-group type of the contract: c10d::Backend, what torch's Gloo and NCCL groups derive from.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace enginery {

using CommGroup = c10d::Backend;
using CommGroupPtr = c10::intrusive_ptr<CommGroup>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

}  // namespace enginery
