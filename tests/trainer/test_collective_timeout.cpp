// trainer.collective_timeout_s over real processes (docs/ARCHITECTURE.md, "Errors"): a peer that stops answering makes
// the other rank's collective fail within the timeout, naming the collective, the rank and the setting, instead of
// waiting forever in Gloo; `enginery train` says at the start how long that wait may be.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "host_api/error.h"
#include "launch/world_group.h"
#include "tests/support/multirank.h"
#include "tests/support/shell_command.h"
#include "support/torch_compat.h"  // compat::remove_all
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

namespace collective_timeout_e2e {  // named: the unity build puts this file beside the other trainer tests

namespace fs = std::filesystem;

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One rank of a 2-rank `enginery train` started as torchrun starts it, its output in `log`.
std::string rank_command(int rank, int port, const fs::path& dir, const fs::path& log) {
  return "RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
         " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " OMP_NUM_THREADS=1 exec " + ENGINERY_EXE +
         " train --config " + ENGINERY_SOURCE_DIR +
         "/examples/demo.toml --set trainer.device=cpu --set trainer.total_training_steps=1000" +
         " --set trainer.test_freq=0 --set trainer.save_freq=0 --set trainer.log_freq=1" +
         " --set trainer.collective_timeout_s=2 --set trainer.default_local_dir=" + (dir / "run").string() +
         " --plugin-dir " + ENGINERY_PLUGIN_DIR + " > " + log.string() + " 2>&1";
}

// Rank 1 stopped (SIGSTOP) once training runs: rank 0 said at the start how long a collective waits for the others,
// and fails within that bound, in one line naming the setting, with no backtrace.
TEST(CollectiveTimeout, AStoppedPeerEndsTheRunWithinTheWaitAnnouncedAtTheStart) {
  const fs::path dir = fs::temp_directory_path() / ("enginery_collective_" + std::to_string(getpid()));
  enginery::compat::remove_all(dir);
  fs::create_directories(dir);
  const int port = 12000 + static_cast<int>(getpid() % 4000) * 2;  // below the rendezvous tests' ports
  enginery::test_support::BackgroundCommand rank1(rank_command(1, port, dir, dir / "rank1.log"));
  enginery::test_support::BackgroundCommand rank0(rank_command(0, port, dir, dir / "rank0.log"));
  ASSERT_GT(rank1.pid(), 1);
  ASSERT_GT(rank0.pid(), 1);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_text(dir / "rank0.log").find(" 2/1000 | loss") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(::kill(static_cast<pid_t>(rank1.pid()), SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  const int status = rank0.wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  const std::string out = read_text(dir / "rank0.log");

  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << out;
  const std::string announced = "world group: 2 ranks over Gloo; a collective waits at most 2 s for the other ranks "
                                "(trainer.collective_timeout_s)\n";
  ASSERT_NE(out.find(announced), std::string::npos) << out;
  EXPECT_LT(out.find(announced), out.find(" 1/1000 | loss")) << out;
  const size_t error = out.find("enginery train: error: rank 0: ");
  ASSERT_NE(error, std::string::npos) << out;
  EXPECT_NE(out.find("rank 0 waited longer than trainer.collective_timeout_s for the other ranks", error),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find('\n', error), out.size() - 1) << out;  // the error is one line, the last
  EXPECT_EQ(out.find("frame #"), std::string::npos) << out;
  EXPECT_LT(seconds, 20.0) << out;
  if (!HasFailure()) enginery::compat::remove_all(dir);
}

}  // namespace collective_timeout_e2e
