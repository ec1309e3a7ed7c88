#include "trainer/collectives.h"

namespace enginery {

std::vector<double> all_reduce(const c10::intrusive_ptr<compat::CommGroup>& group, std::vector<double> values,
                               c10d::ReduceOp op, const torch::Device& device) {
  if (!group || values.empty()) return values;
  // fp64 keeps token counts exact; NCCL and Gloo both reduce doubles.
  std::vector<at::Tensor> tensors = {
      torch::tensor(values, torch::TensorOptions().dtype(torch::kDouble)).to(device)};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  group->allreduce(tensors, options)->wait();
  const at::Tensor result = tensors[0].cpu();
  return std::vector<double>(result.data_ptr<double>(), result.data_ptr<double>() + result.numel());
}

void barrier(const c10::intrusive_ptr<compat::CommGroup>& group, const torch::Device& device) {
  // An all-reduce rather than ProcessGroup::barrier: the same call works on every backend and version.
  all_reduce(group, {1.0}, c10d::ReduceOp::SUM, device);
}

}  // namespace enginery
