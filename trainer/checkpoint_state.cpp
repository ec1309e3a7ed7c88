#include "trainer/checkpoint_state.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "host_api/error.h"

namespace fs = std::filesystem;

namespace enginery {
namespace {

constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kLatestFile = "latest_checkpointed_iteration.txt";

void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) throw EngineryError("cannot write", tmp.string());
  }
  fs::rename(tmp, path);
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
    return std::nullopt;  // cut short: not complete
  }
}

}  // namespace

std::string checkpoint_dir(const std::string& output_dir, int64_t global_step) {
  return (fs::path(output_dir) / ("global_step_" + std::to_string(global_step))).string();
}

void write_trainer_state(const std::string& output_dir, const TrainerState& s) {
  nlohmann::json j = {{"global_step", s.global_step},     {"epoch", s.epoch},
                      {"step_in_epoch", s.step_in_epoch}, {"data_seed", s.data_seed},
                      {"train_batch_size", s.train_batch_size}};
  write_atomically(fs::path(checkpoint_dir(output_dir, s.global_step)) / kStateFile, j.dump(2) + "\n");
  write_atomically(fs::path(output_dir) / kLatestFile, std::to_string(s.global_step) + "\n");
}

std::optional<TrainerState> find_latest_checkpoint(const std::string& output_dir) {
  std::ifstream marker(fs::path(output_dir) / kLatestFile);
  int64_t step = -1;
  if (marker >> step) {
    if (auto s = read_state(checkpoint_dir(output_dir, step))) return s;
  }
  std::optional<TrainerState> best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("global_step_", 0) != 0) continue;
    auto s = read_state(entry.path());
    if (s && (!best || s->global_step > best->global_step)) best = s;
  }
  return best;
}

}  // namespace enginery
