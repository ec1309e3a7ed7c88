// trainer.rendezvous_timeout_s over real `enginery train` ranks started as torchrun starts them (docs/ARCHITECTURE.md,
// "Launching ranks"): a 2-rank job where one rank never arrives, or where rank 0 is stopped after it started its
// store, fails within the timeout, and the message names the rank that waited, what it waited for and the setting.
// Each rank says at the start what it waits for and for how long, and fails in one line: c10d's retry lines and
// their backtraces are held back.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "support/torch_compat.h"  // compat::remove_all
#include "tests/support/shell_command.h"

namespace fs = std::filesystem;

namespace rendezvous_test {  // named: the unity build puts this file beside the other trainer tests

using enginery::test_support::CommandResult;

// A port nobody should be serving: three per process (offset 0..2), below the kernel's ephemeral range.
int test_port(int offset) { return 20000 + static_cast<int>(getpid() % 4000) * 3 + offset; }

class RendezvousTimeout : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("enginery_rendezvous_" + std::to_string(getpid()));
    enginery::compat::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) enginery::compat::remove_all(dir_);
  }
  // The shell command of one rank of a 2-rank job on `port`, the rendezvous bounded by `timeout_s`.
  std::string rank_command(int rank, int port, double timeout_s, const std::string& master = "127.0.0.1") const {
    return "RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
           " MASTER_ADDR=" + master + " MASTER_PORT=" + std::to_string(port) + " OMP_NUM_THREADS=1 exec " + ENGINERY_EXE +
           " train --config " + ENGINERY_SOURCE_DIR + "/examples/demo.toml --set trainer.device=cpu" +
           " --set trainer.total_training_steps=1 --set trainer.default_local_dir=" +
           (dir_ / ("run" + std::to_string(port))).string() + " --set trainer.rendezvous_timeout_s=" +
           std::to_string(timeout_s) + " --plugin-dir " + ENGINERY_PLUGIN_DIR + " 2>&1";
  }
  CommandResult run_rank(int rank, int port, double timeout_s, const std::string& master = "127.0.0.1") const {
    return enginery::test_support::run_shell(rank_command(rank, port, timeout_s, master));
  }
  fs::path dir_;
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Whether something accepts TCP connections on 127.0.0.1:port.
bool serving(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// The start of the error `rank` prints when its 3 s rendezvous expires (launch/rendezvous.h).
std::string waited_3s(int rank) {
  const std::string r = "rank " + std::to_string(rank);
  return "enginery train: error: " + r + ": rendezvous: " + r + " waited 3 s (trainer.rendezvous_timeout_s) for ";
}

// The line a rank prints before it waits (launch/rendezvous.h).
std::string starts_waiting(int rank, const std::string& at, const std::string& server) {
  return "rank " + std::to_string(rank) + ": joining the rendezvous at " + at + " (" + server + "), world size 2; " +
         "waiting at most 3 s (trainer.rendezvous_timeout_s) for every rank to join\n";
}

// Nothing of c10d's own logging: its "[W... TCPStore.cpp...]" retry lines and LibTorch's backtraces.
void expect_no_c10d_log(const std::string& output) {
  EXPECT_FALSE(has(output, "frame #")) << output;
  EXPECT_FALSE(has(output, "Exception raised from")) << output;
  EXPECT_FALSE(has(output, "[c10d]")) << output;
}

// The start line, then the error as the output's last line, and nothing between but the config printout.
void expect_start_then_one_line_error(const std::string& output, const std::string& start, const std::string& error) {
  const size_t started = output.find(start);
  ASSERT_NE(started, std::string::npos) << output;
  const std::string after = output.substr(started + start.size());
  EXPECT_EQ(after.rfind(error, 0), 0u) << after;
  EXPECT_EQ(std::count(after.begin(), after.end(), '\n'), 1) << after;
}

// A rank started as torchrun starts it refuses a bad ENGINERY_CUDA_KERNELS before it waits for any other rank.
TEST_F(RendezvousTimeout, ABadKernelSwitchStopsARankBeforeTheRendezvous) {
  const CommandResult r =
      enginery::test_support::run_shell("ENGINERY_CUDA_KERNELS=swiglu,nope " + rank_command(0, test_port(0), 60));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r.output, "ENGINERY_CUDA_KERNELS is \"swiglu,nope\": \"nope\" is no kernel")) << r.output;
  EXPECT_FALSE(has(r.output, "rendezvous")) << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
}

// Rank 0 alone: rank 1 never arrives. Plugin loading comes before the rendezvous, hence the margin.
TEST_F(RendezvousTimeout, RankZeroNamesTheRankThatNeverArrived) {
  const int port = test_port(0);
  const CommandResult r = run_rank(0, port, 3);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, waited_3s(0) + "rank 1 to join the rendezvous at 127.0.0.1:" + std::to_string(port) +
                                ": never arrived"))
      << r.output;
  expect_start_then_one_line_error(
      r.output, starts_waiting(0, "127.0.0.1:" + std::to_string(port), "served by this rank"), waited_3s(0));
  expect_no_c10d_log(r.output);
  EXPECT_LT(r.seconds, 20.0) << r.output;
}

// Rank 1 alone: rank 0's server never comes up.
TEST_F(RendezvousTimeout, AnotherRankNamesTheServerItCouldNotReach) {
  const int port = test_port(1);
  const CommandResult r = run_rank(1, port, 3);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, waited_3s(1) + "rank 0's rendezvous server at 127.0.0.1:" + std::to_string(port)))
      << r.output;
  expect_start_then_one_line_error(
      r.output, starts_waiting(1, "127.0.0.1:" + std::to_string(port), "rank 0's rendezvous server"), waited_3s(1));
  expect_no_c10d_log(r.output);
  EXPECT_LT(r.seconds, 25.0) << r.output;
}

// MASTER_ADDR that no resolver knows (256 is no IPv4 octet): said at the start, and the error names the lookup's
// failure, which c10d only logs.
TEST_F(RendezvousTimeout, AnUnresolvableMasterAddrIsNamedInOneLine) {
  const int port = test_port(1);
  const CommandResult r = run_rank(1, port, 3, "256.1.1.1");
  EXPECT_EQ(r.status, 1) << r.output;
  expect_start_then_one_line_error(
      r.output, starts_waiting(1, "256.1.1.1:" + std::to_string(port), "rank 0's rendezvous server"), waited_3s(1));
  EXPECT_TRUE(has(r.output, "(MASTER_ADDR 256.1.1.1 does not resolve: ")) << r.output;
  expect_no_c10d_log(r.output);
  EXPECT_LT(r.seconds, 25.0) << r.output;
}

// Rank 0 stopped (SIGSTOP) once its store listens: c10d's client alone would wait for its answer forever.
TEST_F(RendezvousTimeout, AStoppedRankZeroFailsTheOtherRankWithinTheTimeout) {
  const int port = test_port(2);
  enginery::test_support::BackgroundCommand rank0(rank_command(0, port, 120));
  ASSERT_GT(rank0.pid(), 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!serving(port) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(serving(port)) << "rank 0 never served its store";
  ASSERT_EQ(::kill(static_cast<pid_t>(rank0.pid()), SIGSTOP), 0);

  const CommandResult r = run_rank(1, port, 3);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r.output, waited_3s(1) + "rank 0's rendezvous server at 127.0.0.1:" + std::to_string(port)))
      << r.output;
  EXPECT_TRUE(has(r.output, "rank 0 accepted it and never replied")) << r.output;
  EXPECT_LT(r.seconds, 25.0) << r.output;
}

}  // namespace rendezvous_test
