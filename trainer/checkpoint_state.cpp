#include "trainer/checkpoint_state.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "support/durable_fs.h"
#include "host_api/error.h"

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

std::optional<TrainerState> read_state(const fs::path& dir) {
  std::ifstream in(dir / kStateFile);
  if (!in) return std::nullopt;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    TrainerState s;
    s.global_step = j.at("global_step").get<int64_t>();
    s.epoch = j.at("epoch").get<int64_t>();
    s.step_in_epoch = j.at("step_in_epoch").get<int64_t>();
    s.data_seed = j.at("data_seed").get<int64_t>();
    s.train_batch_size = j.at("train_batch_size").get<int64_t>();
    return s;
  } catch (const std::exception&) {
    return std::nullopt;  // not written by us
  }
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
  durable::fresh_dir(temp_checkpoint_dir(output_dir, global_step));
}

void commit_checkpoint(const std::string& output_dir, const TrainerState& state, int64_t max_ckpt_to_keep) {
  const fs::path tmp = temp_checkpoint_dir(output_dir, state.global_step);
  const fs::path final_dir = checkpoint_dir(output_dir, state.global_step);
  durable::write_file(tmp / kStateFile, state_json(state));
  durable::publish_dir(tmp, final_dir);
  durable::replace_file(fs::path(output_dir) / kLatestFile, std::to_string(state.global_step) + "\n");
  durable::retain_newest(final_dir, max_ckpt_to_keep, kStateFile);
}

void write_trainer_state(const std::string& output_dir, const TrainerState& s) {
  durable::replace_file(fs::path(checkpoint_dir(output_dir, s.global_step)) / kStateFile, state_json(s));
  durable::replace_file(fs::path(output_dir) / kLatestFile, std::to_string(s.global_step) + "\n");
}

std::optional<TrainerState> find_latest_checkpoint(const std::string& output_dir) {
  // Every published global_step_<N> is complete, so the highest one wins; the marker may lag behind a kill.
  std::optional<TrainerState> best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    if (!entry.is_directory() || durable::global_step_of(entry.path()) < 0) continue;
    auto s = read_state(entry.path());
    if (s && (!best || s->global_step > best->global_step)) best = s;
  }
  return best;
}

}  // namespace enginery
