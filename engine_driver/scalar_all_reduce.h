#pragma once
// A few doubles all-reduced over a host's group, the one way hosts agree on numbers: the step loop's micro-batch
// counts and token totals, the trainer's metrics and barriers. fp64 keeps token counts exact; NCCL and Gloo both
// reduce doubles.
#include <torch/types.h>

#include <vector>

#include "host_api/comm_group.h"

namespace enginery {

// Element-wise (SUM, MAX, ...). `device`: where the group's tensors must live (CUDA for NCCL). A null group (a world
// of one) or no values returns `values` unchanged. Errors are c10d's, for the caller to name.
std::vector<double> all_reduce_doubles(const CommGroupPtr& group, std::vector<double> values, c10d::ReduceOp op,
                                       const torch::Device& device);

}  // namespace enginery
