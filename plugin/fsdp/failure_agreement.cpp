#include "plugin/fsdp/failure_agreement.h"

#include "host_api/error.h"

namespace enginery {
namespace fsdp {

std::string error_of(const std::function<void()>& step) {
  try {
    step();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

void agree_or_throw(const Collectives& world, const torch::Device& device, const std::string& error,
                    const std::string& stage, const std::function<void()>& on_failure) {
  auto flag = torch::full({1}, error.empty() ? 0.0f : static_cast<float>(world.rank() + 1),
                          torch::TensorOptions().dtype(torch::kFloat).device(device));
  world.all_reduce(flag, ReduceOp::kMax);
  const auto failed = static_cast<int64_t>(flag.item<float>());
  if (failed == 0) return;
  if (on_failure) on_failure();
  world.barrier();  // nobody returns before the cleanup is done
  const std::string where = "fsdp engine, rank " + std::to_string(world.rank()) + ", " + stage;
  if (!error.empty()) throw EngineryError(error, where);
  throw EngineryError("rank " + std::to_string(failed - 1) + " failed (its own error names the cause)", where);
}

}  // namespace fsdp
}  // namespace enginery
