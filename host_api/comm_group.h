#pragma once
// The process-group type of the contract: c10d::Backend, the class torch's Gloo and NCCL groups derive from (the
// ProcessGroup a Python caller holds dispatches to one per device type; python/enginery/__init__.py hands over
// that backend).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace enginery {

using CommGroup = c10d::Backend;
using CommGroupPtr = c10::intrusive_ptr<CommGroup>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

}  // namespace enginery
