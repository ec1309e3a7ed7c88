#pragma once
// The process-group type of the contract: the one LibTorch-version difference the contract itself carries
// (docs/ARCHITECTURE.md, "Version compatibility"). LibTorch 1.13's Gloo/NCCL groups derive from
// c10d::ProcessGroup; from 2.0 they derive from c10d::Backend (ProcessGroup became a dispatching wrapper). Both
// expose the same collective methods, so engines talk to whichever class the version's backends derive from.
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/Store.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace enginery {

#if TORCH_VERSION_MAJOR >= 2
using CommGroup = c10d::Backend;
#else
using CommGroup = c10d::ProcessGroup;
#endif
using CommGroupPtr = c10::intrusive_ptr<CommGroup>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

}  // namespace enginery
