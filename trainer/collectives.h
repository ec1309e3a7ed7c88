#pragma once
// The few host-side collectives the trainer needs over the world group (metrics, counts, barriers).
#include <torch/types.h>

#include <vector>

#include "support/torch_compat.h"

namespace enginery {

// Element-wise all-reduce of a few doubles (SUM or MAX). `device`: where the group's tensors must live (CUDA for
// NCCL). A null group (world size 1) returns the input.
std::vector<double> all_reduce(const c10::intrusive_ptr<compat::CommGroup>& group, std::vector<double> values,
                               c10d::ReduceOp op, const torch::Device& device);

// Every rank reaches this point before any leaves it.
void barrier(const c10::intrusive_ptr<compat::CommGroup>& group, const torch::Device& device);

}  // namespace enginery
