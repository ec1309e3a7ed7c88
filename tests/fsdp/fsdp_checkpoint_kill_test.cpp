// SIGKILL at any moment of a save leaves the newest complete checkpoint loadable with exactly the state it was
// saved with. A separate saver process (checkpoint_saver) trains and saves every step; this test kills it when
// the save of step 3 reaches a given point (watched from outside through the file system) or after a delay, then
// loads every global_step_<N> left and compares it bitwise with an in-process reference run, and checks that the
// next save into the directory finishes what the kill left of a retention (no .deleting folder stays).
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "plugin/fsdp/checkpoint_format.h"
#include "support/durable_fs.h"
#include "tests/fsdp/checkpoint_test_util.h"

extern char** environ;

namespace enginery {
namespace fsdp_test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct KillPoint {
  std::string name;
  std::function<bool(const fs::path&)> reached;
};

std::string listing(const fs::path& dir) {
  std::string out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out += " " + fs::relative(e.path(), dir).string();
  return out;
}

TEST(FsdpCheckpointKill, SigkillDuringSaveLeavesTheLastCompleteCheckpoint) {
  constexpr int64_t kSteps = 4;
  // The reference: the saver's run, in process.
  std::vector<TensorMap> reference(kSteps + 1);
  {
    fsdp::FSDPEngine engine(saver_args(), tiny_builder(TinyConfig{}));
    engine.initialize();
    for (int64_t k = 1; k <= kSteps; ++k) {
      saver_step(engine, k);
      reference[k] = full_state(engine);
    }
  }
  auto exists = [](const std::string& rel) { return [rel](const fs::path& d) { return fs::exists(d / rel); }; };
  auto after_step2 = [](double ms) {
    return [ms, start = std::make_shared<std::optional<Clock::time_point>>()](const fs::path& d) {
      if (!*start && fs::exists(d / "global_step_2")) *start = Clock::now();
      return *start && std::chrono::duration<double, std::milli>(Clock::now() - **start).count() >= ms;
    };
  };
  const std::vector<KillPoint> points = {
      {"temporary dir created", exists(".global_step_3.tmp")},
      {"model shard being written", exists(".global_step_3.tmp/model_rank_0.bin")},
      {"optimizer shard being written", exists(".global_step_3.tmp/optim_rank_0.bin")},
      {"extra state being written", exists(".global_step_3.tmp/extra_rank_0.json")},
      {"metadata being written", exists(".global_step_3.tmp/metadata.json")},
      {"just published", exists("global_step_3")},
      {"retention mid-way", exists(".global_step_1.deleting")},
      {"1 ms after step 2 was published", after_step2(1.0)},
  };
  const fs::path root = fs::temp_directory_path() / ("enginery_kill_" + std::to_string(::getpid()));
  int published_3 = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const fs::path dir = root / std::to_string(i);
    fs::create_directories(dir);
    const std::string steps = std::to_string(kSteps);
    std::vector<char*> argv = {const_cast<char*>(ENGINERY_CHECKPOINT_SAVER), const_cast<char*>(dir.c_str()),
                               const_cast<char*>(steps.c_str()), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
    bool reached = false;
    int status = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
      if (points[i].reached(dir)) {
        reached = true;
        break;
      }
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = 0;
        break;
      }
    }
    if (pid != 0) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    const std::string seen = listing(dir);
    // A kill point the poller never caught (the saver went past it between two looks) still tests a kill.
    std::cout << "kill point '" << points[i].name << "' " << (reached ? "reached" : "passed") << "; left:" << seen
              << "\n";

    int64_t newest = 0;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("global_step_", 0) != 0) continue;
      const int64_t step = std::stoll(name.substr(12));
      auto args = saver_args();
      args.engine.seed = 99;
      fsdp::FSDPEngine loaded(args, tiny_builder(TinyConfig{}));
      loaded.initialize();
      ASSERT_NO_THROW(loaded.load_checkpoint(entry.path().string())) << points[i].name << ": " << name << seen;
      expect_bitwise_equal(full_state(loaded), reference.at(step), points[i].name + ": " + name);
      newest = std::max(newest, step);
    }
    EXPECT_GE(newest, 2) << points[i].name << ": the previous checkpoint is gone;" << seen;
    if (newest >= 3) ++published_3;

    // The next save into the directory (as after a restart) finishes what the kill left of a retention.
    {
      fsdp::FSDPEngine next(saver_args(), tiny_builder(TinyConfig{}));
      next.initialize();
      next.save_checkpoint((dir / "global_step_9").string(), 9, 2);
    }
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      EXPECT_TRUE(durable::published_name_of(name, durable::kDeletingSuffix).empty() &&
                  durable::published_name_of(name, durable::kReplacedSuffix).empty())
          << points[i].name << ": " << name << " left after the next save; before it:" << seen;
    }
  }
  EXPECT_LT(published_3, static_cast<int>(points.size())) << "no kill landed before step 3 was published";
  std::error_code ec;
  compat::remove_all(root, ec);
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
