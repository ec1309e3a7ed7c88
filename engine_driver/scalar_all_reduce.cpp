#include "engine_driver/scalar_all_reduce.h"

namespace enginery {

std::vector<double> all_reduce_doubles(const CommGroupPtr& group, std::vector<double> values, c10d::ReduceOp op,
                                       const torch::Device& device) {
  if (!group || values.empty()) return values;
  std::vector<torch::Tensor> tensors{torch::tensor(values, torch::dtype(torch::kDouble)).to(device)};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  group->allreduce(tensors, options)->wait();
  const torch::Tensor result = tensors[0].cpu();
  return std::vector<double>(result.data_ptr<double>(), result.data_ptr<double>() + result.numel());
}

}  // namespace enginery
