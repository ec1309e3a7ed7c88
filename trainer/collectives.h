#pragma once
// The few host-side collectives the trainer needs over the world group (metrics, counts, barriers), and the guard
// that names a collective when it fails (docs/ARCHITECTURE.md, "Collectives" and "Errors").
#include <torch/types.h>

#include <exception>
#include <string>
#include <vector>

#include "support/torch_compat.h"

namespace enginery {

// engine_driver/scalar_all_reduce.h's all_reduce_doubles, with `what` naming the call site for errors ("all-reduce
// of the step metrics"): any failure is rethrown naming it and this rank.
std::vector<double> all_reduce(const c10::intrusive_ptr<compat::CommGroup>& group, std::vector<double> values,
                               c10d::ReduceOp op, const torch::Device& device, const std::string& what);

// Every rank reaches this point before any leaves it; `what` as for all_reduce.
void barrier(const c10::intrusive_ptr<compat::CommGroup>& group, const torch::Device& device,
             const std::string& what);

// Whether `e` is a collective (or store) wait that expired: c10d and Gloo say "Timed out" / "timeout".
bool is_collective_timeout(const std::exception& e);

// The error for a collective step `what` that failed on `rank` with `e`; for an expired wait it names
// trainer.collective_timeout_s, the setting that bounds the wait, since c10d's own text names neither.
[[noreturn]] void throw_collective_failure(const std::string& what, int64_t rank, const std::exception& e);

// Runs `call`, a step with collectives inside (an engine's train_batch, a checkpoint save); an expired collective
// wait is rethrown naming `what` and `rank`, every other error passes through unchanged.
template <class F>
auto guard_collective(const std::string& what, int64_t rank, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const std::exception& e) {
    if (is_collective_timeout(e)) throw_collective_failure(what, rank, e);
    throw;
  }
}

}  // namespace enginery
