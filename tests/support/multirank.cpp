#include "tests/support/multirank.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include "support/torch_compat.h"  // compat::remove_all

extern char** environ;

namespace enginery {
namespace testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRankEnv = "ENGINERY_TEST_RANK";
constexpr const char* kWorldEnv = "ENGINERY_TEST_WORLD_SIZE";
constexpr const char* kStoreEnv = "ENGINERY_TEST_STORE";
constexpr const char* kDirEnv = "ENGINERY_TEST_DIR";

std::string read_tail(const std::string& path, size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? "..." + s.substr(s.size() - bytes) : s;
}

std::string current_test_filter() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) throw std::runtime_error("run_ranks must be called from inside a GoogleTest test body");
  return std::string(info->test_suite_name()) + "." + info->name();
}

fs::path make_run_dir() {
  const auto base = fs::temp_directory_path();
  for (int attempt = 0;; ++attempt) {
    auto dir = base / ("enginery_ranks_" + std::to_string(getpid()) + "_" +
                       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "_" +
                       std::to_string(attempt));
    if (fs::create_directory(dir)) return dir;
  }
}

void run_as_rank(const std::function<void(const RankContext&)>& body) {
  RankContext ctx;
  ctx.rank = std::atoi(std::getenv(kRankEnv));
  ctx.world_size = std::atoi(std::getenv(kWorldEnv));
  ctx.store_path = std::getenv(kStoreEnv);
  ctx.shared_dir = std::getenv(kDirEnv);
  ctx.store = c10::make_intrusive<c10d::FileStore>(ctx.store_path, ctx.world_size);
  ctx.group = compat::make_gloo_group(ctx.store, ctx.rank, ctx.world_size);
  body(ctx);
}

}  // namespace

bool is_rank_process() { return std::getenv(kRankEnv) != nullptr; }

std::vector<RankResult> run_ranks(int world_size, const std::function<void(const RankContext&)>& body,
                                  const RunOptions& options) {
  if (is_rank_process()) {
    run_as_rank(body);  // exceptions become a gtest failure of this rank's test (and its exit code)
    return {};
  }
  const fs::path dir = make_run_dir();
  const std::string store = (dir / "store").string();
  const std::string filter = "--gtest_filter=" + current_test_filter();
  std::string exe = fs::read_symlink("/proc/self/exe").string();

  std::vector<pid_t> pids(world_size, -1);
  std::vector<std::string> logs(world_size);
  for (int r = 0; r < world_size; ++r) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      if (kv.rfind("OMP_NUM_THREADS=", 0) == 0 || kv.rfind("ENGINERY_TEST_", 0) == 0) continue;
      env_strings.push_back(kv);
    }
    env_strings.push_back(std::string(kRankEnv) + "=" + std::to_string(r));
    env_strings.push_back(std::string(kWorldEnv) + "=" + std::to_string(world_size));
    env_strings.push_back(std::string(kStoreEnv) + "=" + store);
    env_strings.push_back(std::string(kDirEnv) + "=" + dir.string());
    env_strings.push_back("OMP_NUM_THREADS=1");
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> arg_strings{exe, filter, "--gtest_color=no"};
    std::vector<char*> argv;
    for (auto& s : arg_strings) argv.push_back(s.data());
    argv.push_back(nullptr);

    logs[r] = (dir / ("rank" + std::to_string(r) + ".log")).string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, logs[r].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    const int rc = posix_spawn(&pids[r], exe.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      ADD_FAILURE() << "rank " << r << ": posix_spawn of " << exe << " failed: " << std::strerror(rc);
      pids[r] = -1;
    }
  }

  std::vector<RankResult> results(world_size);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options.timeout_s);
  int running = 0;
  for (int r = 0; r < world_size; ++r) {
    results[r].rank = r;
    if (pids[r] > 0) ++running;
  }
  bool killed = false;
  while (running > 0) {
    for (int r = 0; r < world_size; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      if (WIFEXITED(status)) results[r].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) results[r].signal = WTERMSIG(status);
      pids[r] = -1;
      --running;
    }
    if (running > 0 && !killed && std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);  // only the ranks this call spawned
        results[r].timed_out = true;
      }
      killed = true;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  bool all_ok = true;
  for (int r = 0; r < world_size; ++r) {
    results[r].output_tail = read_tail(logs[r], options.output_tail_bytes);
    if (results[r].ok()) continue;
    all_ok = false;
    std::string how = results[r].timed_out ? "timed out after " + std::to_string(options.timeout_s) + " s"
                      : results[r].signal ? "killed by signal " + std::to_string(results[r].signal)
                                          : "exit code " + std::to_string(results[r].exit_code);
    ADD_FAILURE() << "rank " << r << " of " << world_size << " failed (" << how << "); its output ends with:\n"
                  << results[r].output_tail;
  }
  if (all_ok) enginery::compat::remove_all(dir);
  return results;
}

}  // namespace testing
}  // namespace enginery
