#pragma once
// Multi-rank tests with real processes (docs/ARCHITECTURE.md, "Launching ranks"): a GoogleTest body calls
// run_ranks(N, body). In the test process (the "parent") that spawns N copies of the test binary (spawn_ranks of
// launch/spawn.h) filtered to the current test, with ENGINERY_TEST_RANK / ENGINERY_TEST_WORLD_SIZE /
// ENGINERY_TEST_STORE / ENGINERY_TEST_DIR set; waits for all of them (with a timeout, killing stragglers); and
// fails the test once per failed rank with its exit status and the tail of its output. In a spawned copy ("rank
// process") the same call builds a FileStore and a Gloo group (launch/world_group.h) and runs body(ctx); gtest
// assertions inside the body fail that rank.
//
//   TEST(MyArea, Allreduce) {
//     enginery::testing::run_ranks(2, [](const enginery::testing::RankContext& ctx) {
//       auto t = torch::ones({1});
//       std::vector<torch::Tensor> v{t};
//       ctx.group->allreduce(v)->wait();
//       EXPECT_EQ(t.item<float>(), 2.0f);
//     });
//   }
//
// Rules: at most one run_ranks call per TEST, as the test's last statement (a rank process runs the test body up
// to it too, so any code before it must be cheap and free of side effects). Ranks may exchange files through
// ctx.shared_dir (fresh per run, removed afterwards unless the run failed). Rank processes get OMP_NUM_THREADS=1.
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "support/torch_compat.h"

namespace enginery {
namespace testing {

struct RankContext {
  int rank = 0;
  int world_size = 1;
  std::string store_path;   // FileStore file shared by the ranks of this run
  std::string shared_dir;   // scratch folder shared by the ranks of this run
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::CommGroup> group;  // Gloo over all ranks of the run
};

struct RunOptions {
  double timeout_s = 120.0;
  size_t output_tail_bytes = 4000;  // how much of a failed rank's output the failure message shows
};

struct RankResult {
  int rank = 0;
  int exit_code = -1;   // -1: killed by a signal or timed out
  int signal = 0;
  bool timed_out = false;
  std::string output_tail;
  bool ok() const { return exit_code == 0; }
};

// True inside a rank process.
bool is_rank_process();

// See the header comment. Returns the per-rank results in the parent (the test has already failed for each
// failed rank); returns an empty vector in a rank process.
std::vector<RankResult> run_ranks(int world_size, const std::function<void(const RankContext&)>& body,
                                  const RunOptions& options = {});

}  // namespace testing
}  // namespace enginery
