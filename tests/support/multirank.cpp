#include "tests/support/multirank.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "support/torch_compat.h"  // compat::remove_all
#include "launch/spawn.h"
#include "launch/world_group.h"

namespace enginery {
namespace testing {
namespace {

namespace fs = std::filesystem;

// The harness's own variables, not RANK / WORLD_SIZE: a test binary run inside a torchrun or srun job must not
// mistake that job's rank for its own.
constexpr const char* kRankEnv = "ENGINERY_TEST_RANK";
constexpr const char* kWorldEnv = "ENGINERY_TEST_WORLD_SIZE";
constexpr const char* kStoreEnv = "ENGINERY_TEST_STORE";
constexpr const char* kDirEnv = "ENGINERY_TEST_DIR";

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
  ctx.store = make_file_store(ctx.store_path, ctx.world_size);
  ctx.group = make_world_group(ctx.store, ctx.rank, ctx.world_size, "cpu");
  body(ctx);
}

// Rank processes: this test binary again, running only the current test, one thread each.
SpawnOptions rank_processes(int world_size, const fs::path& dir, const RunOptions& options) {
  SpawnOptions spawn;
  spawn.nproc = world_size;
  spawn.argv = {self_executable(), "--gtest_filter=" + current_test_filter(), "--gtest_color=no"};
  spawn.unset = {"ENGINERY_TEST_*"};
  const std::string store = (dir / "store").string();
  spawn.rank_env = [world_size, store, dir = dir.string()](int rank) -> std::vector<std::string> {
    return {std::string(kRankEnv) + "=" + std::to_string(rank),
            std::string(kWorldEnv) + "=" + std::to_string(world_size), std::string(kStoreEnv) + "=" + store,
            std::string(kDirEnv) + "=" + dir, "OMP_NUM_THREADS=1"};
  };
  for (int r = 0; r < world_size; ++r) {
    spawn.log_files.push_back((dir / ("rank" + std::to_string(r) + ".log")).string());
  }
  spawn.timeout_s = options.timeout_s;
  return spawn;
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
  const SpawnOptions spawn = rank_processes(world_size, dir, options);
  const SpawnResult spawned = spawn_ranks(spawn);

  std::vector<RankResult> results;
  bool all_ok = true;
  for (const RankExit& exit : spawned.ranks) {
    RankResult result;
    result.rank = exit.rank;
    result.exit_code = exit.exit_code;
    result.signal = exit.signal;
    result.timed_out = exit.timed_out;
    result.output_tail = read_log(spawn.log_files[static_cast<size_t>(exit.rank)], options.output_tail_bytes);
    if (!result.ok()) {
      all_ok = false;
      ADD_FAILURE() << "rank " << exit.rank << " of " << world_size << " failed (" << exit.describe()
                    << "); its output ends with:\n"
                    << result.output_tail;
    }
    results.push_back(std::move(result));
  }
  if (all_ok) enginery::compat::remove_all(dir);
  return results;
}

}  // namespace testing
}  // namespace enginery
