// trainer.collective_timeout_s over real processes (docs/ARCHITECTURE.md, "Errors"): a peer that stops answering makes
// the other rank's collective fail within the timeout, naming the collective, the rank and the setting, instead of
// waiting forever in Gloo.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "host_api/error.h"
#include "launch/world_group.h"
#include "tests/support/multirank.h"
#include "trainer/collectives.h"

namespace enginery {
namespace {

TEST(CollectiveTimeout, AStalledPeerFailsTheCollectiveByNameWithinTheTimeout) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto store = c10::make_intrusive<c10d::PrefixStore>("timeout_test", ctx.store);
    auto group = make_world_group(store, ctx.rank, ctx.world_size, "cpu", collective_timeout(2.0));
    EXPECT_EQ(all_reduce(group, {1.0}, c10d::ReduceOp::SUM, torch::kCPU, "warm-up")[0], 2.0);
    if (ctx.rank == 1) {
      // Stalled (as if SIGSTOPped, or hung in a step): it never joins the next collective, then leaves cleanly.
      std::this_thread::sleep_for(std::chrono::seconds(8));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    std::string message;
    try {
      all_reduce(group, {1.0}, c10d::ReduceOp::SUM, torch::kCPU, "all-reduce of the step metrics at step 3");
    } catch (const EngineryError& e) {
      message = e.what();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(message.find("all-reduce of the step metrics at step 3: rank 0 waited longer than "
                           "trainer.collective_timeout_s for the other ranks"),
              std::string::npos)
        << message;
    EXPECT_GE(seconds, 1.5) << message;
    EXPECT_LT(seconds, 6.0) << message;
  });
}

// The guard around an engine's step passes ordinary errors through and names the step for an expired wait.
TEST(CollectiveTimeout, TheGuardNamesOnlyExpiredWaits) {
  const std::string plain = [] {
    try {
      guard_collective("engine train_batch at step 1", 0, [] { throw EngineryError("bad input", "data"); });
    } catch (const EngineryError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_EQ(plain, "data: bad input");
  const std::string expired = [] {
    try {
      guard_collective("engine train_batch at step 1", 1, [] {
        throw std::runtime_error("[gloo/transport/tcp/pair.cc:598] Timed out waiting 2000ms for recv");
      });
    } catch (const EngineryError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(expired.find("engine train_batch at step 1: rank 1 waited longer than trainer.collective_timeout_s"),
            std::string::npos)
      << expired;
  EXPECT_NE(expired.find("Timed out waiting 2000ms"), std::string::npos) << expired;
}

}  // namespace
}  // namespace enginery
