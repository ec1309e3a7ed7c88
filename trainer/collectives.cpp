#include "trainer/collectives.h"

#include "engine_driver/scalar_all_reduce.h"
#include "host_api/error.h"
#include "support/torch_errors.h"

namespace enginery {

bool is_collective_timeout(const std::exception& e) {
  // Our own errors (already named, possibly naming the timeout key) pass through as they are.
  if (dynamic_cast<const EngineryError*>(&e) != nullptr) return false;
  return compat::error_says_timeout(e);
}

void throw_collective_failure(const std::string& what, int64_t rank, const std::exception& e) {
  const std::string rank_text = "rank " + std::to_string(rank);
  if (is_collective_timeout(e)) {
    throw EngineryError(rank_text + " waited longer than trainer.collective_timeout_s for the other ranks (one of "
                                    "them is stopped, hung or gone; raise the setting if a step legitimately takes "
                                    "that long): " + compat::error_message(e),
                        what);
  }
  throw EngineryError(rank_text + " failed: " + compat::error_message(e), what);
}

std::vector<double> all_reduce(const c10::intrusive_ptr<compat::CommGroup>& group, std::vector<double> values,
                               c10d::ReduceOp op, const torch::Device& device, const std::string& what) {
  try {
    return all_reduce_doubles(group, std::move(values), op, device);
  } catch (const std::exception& e) {
    throw_collective_failure(what, group->getRank(), e);
  }
}

void barrier(const c10::intrusive_ptr<compat::CommGroup>& group, const torch::Device& device,
             const std::string& what) {
  // An all-reduce rather than ProcessGroup::barrier: the same call works on every backend and version.
  all_reduce(group, {1.0}, c10d::ReduceOp::SUM, device, what);
}

}  // namespace enginery
