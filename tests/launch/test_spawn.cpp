// spawn_ranks with its log-file output (the multi-rank test harness and the conformance suite use it that way):
// what a rank inherits, the timeout, a failed exec, and the RankEnv round trip through a rank's environment.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "launch/rank_env.h"
#include "launch/rank_output.h"
#include "launch/spawn.h"

namespace enginery {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> log_files(const std::string& stem, int n) {
  std::vector<std::string> files;
  const fs::path dir = fs::temp_directory_path();
  for (int r = 0; r < n; ++r) {
    files.push_back((dir / (stem + "_" + std::to_string(::getpid()) + "_rank" + std::to_string(r) + ".log")).string());
  }
  return files;
}

void remove_files(const std::vector<std::string>& files) {
  for (const auto& f : files) std::remove(f.c_str());
}

TEST(Spawn, RanksInheritTheEnvironmentMinusUnsetPlusTheirOwn) {
  setenv("ENGINERY_SPAWN_TEST_DROPPED", "1", 1);
  setenv("ENGINERY_SPAWN_KEPT", "1", 1);
  setenv("ENGINERY_SPAWN_REPLACED", "parent", 1);
  SpawnOptions o;
  o.nproc = 2;
  o.argv = {"/usr/bin/env"};
  o.unset = {"ENGINERY_SPAWN_TEST_*"};
  o.rank_env = [](int rank) -> std::vector<std::string> {
    return {"ENGINERY_SPAWN_RANK=" + std::to_string(rank), "ENGINERY_SPAWN_REPLACED=child"};
  };
  o.log_files = log_files("spawn_env", 2);
  o.timeout_s = 60;
  const SpawnResult r = spawn_ranks(o);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.first_failed, -1);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string log = read_log(o.log_files[rank]);
    EXPECT_TRUE(r.ranks[rank].ok()) << r.ranks[rank].describe();
    EXPECT_NE(log.find("ENGINERY_SPAWN_RANK=" + std::to_string(rank) + "\n"), std::string::npos) << log;
    EXPECT_NE(log.find("ENGINERY_SPAWN_KEPT=1\n"), std::string::npos) << log;
    EXPECT_NE(log.find("ENGINERY_SPAWN_REPLACED=child\n"), std::string::npos) << log;
    EXPECT_EQ(log.find("ENGINERY_SPAWN_REPLACED=parent"), std::string::npos) << log;
    EXPECT_EQ(log.find("ENGINERY_SPAWN_TEST_DROPPED"), std::string::npos) << log;
  }
  remove_files(o.log_files);
  unsetenv("ENGINERY_SPAWN_TEST_DROPPED");
  unsetenv("ENGINERY_SPAWN_KEPT");
  unsetenv("ENGINERY_SPAWN_REPLACED");
}

TEST(Spawn, TimeoutKillsEveryRankStillRunning) {
  SpawnOptions o;
  o.nproc = 2;
  o.argv = {ENGINERY_FAKE_RANK, "fail_rank=0", "exit=0", "delay_ms=0"};  // rank 0 exits 0, rank 1 sleeps 60 s
  o.rank_env = [](int rank) {
    RankEnv env;
    env.rank = rank;
    env.world_size = 2;
    return rank_env_variables(env);
  };
  o.log_files = log_files("spawn_timeout", 2);
  o.timeout_s = 1.0;
  const auto start = std::chrono::steady_clock::now();
  const SpawnResult r = spawn_ranks(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);
  EXPECT_TRUE(r.ranks[0].ok()) << r.ranks[0].describe();
  EXPECT_FALSE(r.ranks[0].timed_out);
  EXPECT_TRUE(r.ranks[1].timed_out);
  EXPECT_EQ(r.ranks[1].signal, 9);
  EXPECT_EQ(r.ranks[1].exit_code, -1);
  EXPECT_EQ(r.ranks[1].status(), 137);
  EXPECT_EQ(r.first_failed, 1);
  EXPECT_NE(r.ranks[1].describe().find("timed out after"), std::string::npos) << r.ranks[1].describe();
  EXPECT_NE(read_log(o.log_files[1]).find("hello from rank 1 of 2"), std::string::npos);
  remove_files(o.log_files);
}

TEST(Spawn, ExecFailureExitsWith127AndSaysSo) {
  SpawnOptions o;
  o.nproc = 1;
  o.argv = {"/nonexistent/enginery-rank"};
  o.log_files = log_files("spawn_exec", 1);
  o.timeout_s = 30;
  const SpawnResult r = spawn_ranks(o);
  EXPECT_EQ(r.ranks[0].exit_code, 127);
  EXPECT_EQ(r.first_failed, 0);
  EXPECT_NE(read_log(o.log_files[0]).find("cannot execute /nonexistent/enginery-rank"), std::string::npos);
  remove_files(o.log_files);
}

TEST(Spawn, ReadLogKeepsTheTail) {
  const auto files = log_files("spawn_tail", 1);
  { std::ofstream(files[0]) << "0123456789"; }
  EXPECT_EQ(read_log(files[0]), "0123456789");
  EXPECT_EQ(read_log(files[0], 4), "...6789");
  EXPECT_EQ(read_log(files[0] + ".missing"), "");
  remove_files(files);
}

TEST(Spawn, RankEnvRoundTripsThroughTheEnvironment) {
  RankEnv env;
  env.rank = 2;
  env.world_size = 4;
  env.local_rank = 0;
  env.local_world_size = 2;
  env.master_addr = "10.1.2.3";
  env.master_port = 4567;
  env.spawned_locally = true;
  const char* names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "ENGINERY_LOCAL_LAUNCH"};
  for (const std::string& variable : rank_env_variables(env)) {
    const size_t eq = variable.find('=');
    setenv(variable.substr(0, eq).c_str(), variable.substr(eq + 1).c_str(), 1);
  }
  const auto back = rank_env_from_environment();
  for (const char* n : names) unsetenv(n);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rank, 2);
  EXPECT_EQ(back->world_size, 4);
  EXPECT_EQ(back->local_rank, 0);
  EXPECT_EQ(back->local_world_size, 2);
  EXPECT_EQ(back->master_addr, "10.1.2.3");
  EXPECT_EQ(back->master_port, 4567);
  EXPECT_TRUE(back->spawned_locally);
}

// A rank dying of a LibTorch error prints its message, then the backtrace; the launcher's summary quotes the
// message, never "frame #7: <unknown function>".
TEST(Spawn, LastLineSkipsBacktraceFrames) {
  PrefixedLines lines("[rank 1] ", nullptr);
  const std::string text =
      "enginery train: error: rank 1: index 300 is out of bounds\nException raised from foo at bar.cpp:1\n"
      "frame #0: c10::Error::Error() + 0x9e\nframe #7: <unknown function>\n   \n";
  lines.append(text.data(), text.size());
  lines.finish();
  EXPECT_EQ(lines.last_line(), "enginery train: error: rank 1: index 300 is out of bounds");
}

}  // namespace
}  // namespace enginery
