#include "trainer/loop/run_dir.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "host_api/error.h"
#include "support/durable_fs.h"
#include "trainer/loop/checkpoint_state.h"

namespace fs = std::filesystem;

namespace enginery {
namespace {

// The directory without a trailing separator, so that rename() and "<dir>.old-..." work on its real name.
fs::path normalized(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty() && p.has_parent_path()) p = p.parent_path();
  return p;
}

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// <dir>.old-20261203T142501Z, with -2, -3, ... when a run was already moved aside within the same second.
fs::path aside_name(const fs::path& dir) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &utc);
  const std::string base = dir.string() + ".old-" + stamp;
  fs::path candidate = base;
  std::error_code ec;
  for (int n = 2; fs::exists(fs::symlink_status(candidate, ec)); ++n) candidate = base + "-" + std::to_string(n);
  return candidate;
}

// Renames the whole directory (atomic: the old run is either all at its old name or all at the new one).
std::string move_aside(const fs::path& dir) {
  const fs::path aside = aside_name(dir);
  if (::rename(dir.c_str(), aside.c_str()) != 0) {
    throw EngineryError("cannot move the previous run to " + aside.string() + ": " + std::strerror(errno),
                        dir.string());
  }
  durable::sync_path(aside.parent_path().empty() ? fs::path(".") : aside.parent_path());
  fs::create_directories(dir);
  return aside.string();
}

// global_step_<N>, or .global_step_<N>.tmp: a save that was killed before it was published.
bool is_checkpoint_name(const std::string& name) {
  return durable::global_step_of(name) >= 0 ||
         durable::global_step_of(durable::published_name_of(name, durable::kTempSuffix)) >= 0;
}

}  // namespace

std::vector<std::string> run_dir_contents(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "metrics.jsonl" || name == "latest_checkpointed_iteration.txt" || is_checkpoint_name(name)) {
      found.push_back(name);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

PreparedOutputDir prepare_output_dir(const TrainConfig& config, bool fresh_run) {
  const fs::path dir = normalized(config.output_dir());
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw EngineryError("exists and is not a directory", dir.string(), "a directory for the run's outputs");
  }
  const std::vector<std::string> contents = run_dir_contents(dir.string());
  if (config.trainer.resume_mode == "auto") {
    if (fresh_run) {
      throw EngineryError("--fresh-run starts over, trainer.resume_mode = \"auto\" (--resume) continues: pick one",
                          config.where("trainer.resume_mode"));
    }
    if (contents.empty()) return {};
    // Before the checkpoints are judged: a checkpoint a killed replacement set aside is back under its name.
    PreparedOutputDir prepared{"", finish_interrupted_saves(dir.string())};
    std::vector<UnusableCheckpoint> older;
    if (checkpoint_to_resume(dir.string(), older)) return prepared;
    throw EngineryError("holds a run (" + joined(contents) + ") but no checkpoint to resume from; --fresh-run "
                        "moves it to " + dir.string() + ".old-<time> and starts over",
                        dir.string());
  }
  if (contents.empty()) return {};
  if (!fresh_run) {
    throw EngineryError("already holds a run (" + joined(contents) + "); a new run would overwrite it. Continue it "
                        "with --resume, or start over with --fresh-run (moves it to " + dir.string() +
                            ".old-<time> first), or set trainer.default_local_dir / trainer.experiment_name",
                        dir.string());
  }
  return {move_aside(dir), {}};
}

}  // namespace enginery
