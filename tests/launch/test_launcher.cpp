#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "host_api/error.h"
#include "launch/local_launch.h"

namespace enginery {
namespace {

using Clock = std::chrono::steady_clock;

LaunchResult launch(std::vector<std::string> args, double grace, std::string* out_text, double* seconds) {
  LaunchOptions o;
  o.nproc = 2;
  o.executable = ENGINERY_FAKE_RANK;
  o.args = std::move(args);
  o.grace_seconds = grace;
  std::ostringstream out, err;
  const auto start = Clock::now();
  LaunchResult r = launch_local(o, out, err);
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
  *out_text = out.str() + err.str();
  return r;
}

TEST(Launcher, AllRanksSucceed) {
  std::string out;
  double seconds = 0;
  LaunchResult r = launch({}, 5.0, &out, &seconds);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.failed_rank, -1);
  EXPECT_NE(out.find("[rank 0] hello from rank 0 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] hello from rank 1 of 2"), std::string::npos) << out;
}

// The launcher serves the rendezvous store before any rank starts: no port is left free for another job to take
// between the launcher choosing it and rank 0 binding it (two sweeps' launchers once collided so, EADDRINUSE).
TEST(Launcher, TheRendezvousStoreIsServedBeforeAnyRankStarts) {
  std::string out;
  double seconds = 0;
  LaunchResult r = launch({"connect"}, 5.0, &out, &seconds);
  EXPECT_EQ(r.exit_code, 0) << out;
  EXPECT_NE(out.find("[rank 0] rendezvous port accepts"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1] rendezvous port accepts"), std::string::npos) << out;
}

TEST(Launcher, FailedRankStopsTheOthersWithItsMessage) {
  std::string out;
  double seconds = 0;
  LaunchResult r = launch({"fail_rank=1", "exit=3"}, 5.0, &out, &seconds);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.failed_rank, 1);
  EXPECT_NE(r.message.find("rank 1 exited with status 3: fake failure on rank 1"), std::string::npos) << r.message;
  EXPECT_LT(seconds, 5.0) << "rank 0 sleeps 60 s; SIGTERM must end it at once";
  EXPECT_NE(out.find("[rank 1] fake failure on rank 1"), std::string::npos) << out;
}

TEST(Launcher, RankIgnoringSigtermIsKilledAfterGrace) {
  std::string out;
  double seconds = 0;
  LaunchResult r = launch({"fail_rank=0", "exit=7", "stubborn"}, 1.0, &out, &seconds);
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.failed_rank, 0);
  EXPECT_GE(seconds, 0.9);
  EXPECT_LT(seconds, 6.0);
}

TEST(Launcher, RankEnvironmentFromTorchrunAndSlurm) {
  const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_NODELIST", "ENGINERY_LOCAL_LAUNCH"};
  for (const char* n : names) unsetenv(n);
  EXPECT_FALSE(rank_env_from_environment().has_value());

  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_STEP_NODELIST", "nodeA,nodeB", 1);
  auto slurm = rank_env_from_environment();
  ASSERT_TRUE(slurm.has_value());
  EXPECT_EQ(slurm->rank, 3);
  EXPECT_EQ(slurm->world_size, 4);
  EXPECT_EQ(slurm->local_rank, 1);
  EXPECT_EQ(slurm->master_addr, "nodeA");

  setenv("RANK", "1", 1);  // torchrun's variables win over SLURM's
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "1234", 1);
  auto torchrun = rank_env_from_environment();
  ASSERT_TRUE(torchrun.has_value());
  EXPECT_EQ(torchrun->rank, 1);
  EXPECT_EQ(torchrun->world_size, 2);
  EXPECT_EQ(torchrun->master_addr, "10.0.0.1");
  EXPECT_EQ(torchrun->master_port, 1234);

  // 70000 would wrap to port 4464 in 16 bits: refused, naming the variable.
  setenv("MASTER_PORT", "70000", 1);
  try {
    rank_env_from_environment();
    ADD_FAILURE() << "MASTER_PORT=70000 accepted";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_PORT 70000 is not a TCP port (allowed: 1..65535)"),
              std::string::npos)
        << e.what();
  }
  setenv("MASTER_PORT", "1234", 1);

  setenv("RANK", "2", 1);
  EXPECT_THROW(rank_env_from_environment(), std::exception);
  for (const char* n : names) unsetenv(n);
}

}  // namespace
}  // namespace enginery
