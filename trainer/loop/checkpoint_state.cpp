#include "trainer/loop/checkpoint_state.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "host_api/error.h"
#include "support/durable_fs.h"
#include "support/torch_compat.h"  // compat::remove_all

namespace fs = std::filesystem;

namespace enginery {
namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kLatestFile = "latest_checkpointed_iteration.txt";
constexpr const char* kEngineDir = "actor";

std::string state_json(const TrainerState& s) {
  nlohmann::json j = {{"global_step", s.global_step},     {"epoch", s.epoch},
                      {"step_in_epoch", s.step_in_epoch}, {"data_seed", s.data_seed},
                      {"train_batch_size", s.train_batch_size}};
  return j.dump(2) + "\n";
}

// The state in `dir` (named global_step_<step>), or why it cannot be resumed.
struct StateRead {
  std::optional<TrainerState> state;
  std::string problem;
};

StateRead read_state(const fs::path& dir, int64_t step) {
  const fs::path file = dir / kStateFile;
  std::error_code ec;
  // Only a regular file: opening a FIFO would block.
  if (!fs::exists(file, ec)) return {std::nullopt, std::string(kStateFile) + " is missing"};
  if (!fs::is_regular_file(file, ec)) return {std::nullopt, std::string(kStateFile) + " is not a regular file"};
  std::ifstream in(file);
  if (!in) return {std::nullopt, std::string(kStateFile) + " cannot be opened: " + std::strerror(errno)};
  TrainerState s;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    s.global_step = j.at("global_step").get<int64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.step_in_epoch = j.at("step_in_epoch").get<int64_t>();
    s.data_seed = j.at("data_seed").get<int64_t>();
    s.train_batch_size = j.at("train_batch_size").get<int64_t>();
  } catch (const std::exception& e) {
    return {std::nullopt, std::string(kStateFile) + " is unreadable: " + e.what()};
  }
  if (s.global_step != step) {
    return {std::nullopt, std::string(kStateFile) + " says global_step " + std::to_string(s.global_step)};
  }
  if (s.epoch < 0 || s.step_in_epoch < 0 || s.train_batch_size <= 0) {
    return {std::nullopt, std::string(kStateFile) + " holds a negative data position or batch size"};
  }
  return {s, ""};
}

// Keeps the `max_keep` newest resumable checkpoints (just_written always one of them) and retires the older
// resumable ones; anything it cannot read stays where it is.
void retain_resumable(const std::string& output_dir, const CheckpointScan& scan, int64_t just_written,
                      int64_t max_keep) {
  if (max_keep <= 0) return;
  std::vector<int64_t> older;
  for (const TrainerState& s : scan.resumable) {
    if (s.global_step != just_written) older.push_back(s.global_step);
  }
  std::sort(older.begin(), older.end(), std::greater<int64_t>());
  for (size_t i = static_cast<size_t>(max_keep - 1); i < older.size(); ++i) {
    durable::retire_dir(checkpoint_dir(output_dir, older[i]));
  }
}

// What a save of a step may replace: nothing, or that step's earlier checkpoint holding only what a save writes
// (trainer_state.json and the engine's directory). Replacing removes the whole directory, so anything else in it
// would be lost; refused before the engine writes anything.
void check_replaceable(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return;
  const std::string allowed = "only " + std::string(kStateFile) + " and " + kEngineDir + "/, as a save wrote them";
  if (!fs::is_directory(dir, ec)) throw EngineryError("exists and is not a directory", dir.string(), allowed);
  const std::vector<std::string> foreign = durable::foreign_entries(dir, {kStateFile, kEngineDir});
  if (foreign.empty()) return;
  std::string names;
  for (const auto& n : foreign) names += (names.empty() ? "" : ", ") + n;
  throw EngineryError("holds files its checkpoint did not write (" + names +
                          "): saving this step again would delete them; move them out first",
                      dir.string(), allowed);
}

}  // namespace

std::string checkpoint_dir(const std::string& output_dir, int64_t global_step) {
  return (fs::path(output_dir) / ("global_step_" + std::to_string(global_step))).string();
}

std::string engine_checkpoint_dir(const std::string& checkpoint_dir) {
  return (fs::path(checkpoint_dir) / kEngineDir).string();
}

std::string temp_checkpoint_dir(const std::string& output_dir, int64_t global_step) {
  return durable::temp_dir_for(checkpoint_dir(output_dir, global_step)).string();
}

void begin_checkpoint(const std::string& output_dir, int64_t global_step) {
  durable::finish_interrupted_checkpoints(output_dir);
  check_replaceable(checkpoint_dir(output_dir, global_step));
  durable::fresh_dir(temp_checkpoint_dir(output_dir, global_step));
}

std::vector<std::string> finish_interrupted_saves(const std::string& output_dir) {
  std::vector<std::string> done = durable::finish_interrupted_checkpoints(output_dir);
  std::vector<fs::path> temporary;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (durable::global_step_of(durable::published_name_of(name, durable::kTempSuffix)) >= 0) {
      temporary.push_back(entry.path());
    }
  }
  for (const fs::path& dir : temporary) {
    compat::remove_all(dir, ec);
    if (ec) throw EngineryError(std::string("cannot remove: ") + std::strerror(ec.value()), dir.string());
    done.push_back("removed " + dir.string() + ", left by an interrupted save");
  }
  return done;
}

std::vector<UnusableCheckpoint> commit_checkpoint(const std::string& output_dir, const TrainerState& state,
                                                  int64_t max_ckpt_to_keep) {
  const fs::path tmp = temp_checkpoint_dir(output_dir, state.global_step);
  const fs::path final_dir = checkpoint_dir(output_dir, state.global_step);
  durable::write_file(tmp / kStateFile, state_json(state));
  durable::publish_dir(tmp, final_dir);
  durable::replace_file(fs::path(output_dir) / kLatestFile, std::to_string(state.global_step) + "\n");
  CheckpointScan scan = scan_checkpoints(output_dir);
  retain_resumable(output_dir, scan, state.global_step, max_ckpt_to_keep);
  return scan.unusable;
}

void write_trainer_state(const std::string& output_dir, const TrainerState& s) {
  durable::replace_file(fs::path(checkpoint_dir(output_dir, s.global_step)) / kStateFile, state_json(s));
  durable::replace_file(fs::path(output_dir) / kLatestFile, std::to_string(s.global_step) + "\n");
}

CheckpointScan scan_checkpoints(const std::string& output_dir) {
  CheckpointScan scan;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const int64_t step = durable::global_step_of(entry.path());
    if (step < 0) continue;
    if (!entry.is_directory(ec)) {
      scan.unusable.push_back({step, entry.path().string(), "not a directory"});
      continue;
    }
    StateRead read = read_state(entry.path(), step);
    if (read.state) {
      scan.resumable.push_back(*read.state);
    } else {
      scan.unusable.push_back({step, entry.path().string(), read.problem});
    }
  }
  std::sort(scan.resumable.begin(), scan.resumable.end(),
            [](const TrainerState& a, const TrainerState& b) { return a.global_step < b.global_step; });
  std::sort(scan.unusable.begin(), scan.unusable.end(),
            [](const UnusableCheckpoint& a, const UnusableCheckpoint& b) { return a.global_step < b.global_step; });
  return scan;
}

std::optional<TrainerState> find_latest_checkpoint(const std::string& output_dir) {
  // Every published global_step_<N> is complete, so the highest one wins; the marker may lag behind a kill.
  CheckpointScan scan = scan_checkpoints(output_dir);
  if (scan.resumable.empty()) return std::nullopt;
  return scan.resumable.back();
}

std::optional<TrainerState> checkpoint_to_resume(const std::string& output_dir,
                                                 std::vector<UnusableCheckpoint>& older_unusable) {
  CheckpointScan scan = scan_checkpoints(output_dir);
  std::optional<TrainerState> latest;
  if (!scan.resumable.empty()) latest = scan.resumable.back();
  for (const UnusableCheckpoint& u : scan.unusable) {
    if (latest && u.global_step < latest->global_step) {
      older_unusable.push_back(u);
      continue;
    }
    const std::string fallback = latest ? "global_step_" + std::to_string(latest->global_step) : "step 0";
    throw EngineryError("checkpoint " + u.dir + " cannot be resumed: " + u.reason + "; a run resumed from " +
                            fallback + " would overwrite it. Repair it, move it out of " + output_dir +
                            " to resume from " + fallback + ", or start over with --fresh-run",
                        "--resume");
  }
  return latest;
}

}  // namespace enginery
