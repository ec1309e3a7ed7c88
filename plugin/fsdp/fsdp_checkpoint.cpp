// FSDPEngine: sharded checkpoints for the same world size and strategy: one file per rank with its master shards,
// AdamW state, grad scaler and scheduler state (torch::serialize archives).
#include <filesystem>

#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "host_api/torch_compat.h"  // compat::remove_all

namespace enginery {
namespace fsdp {
namespace {

namespace fs = std::filesystem;

std::string shard_file(const std::string& dir, int64_t rank, int64_t world) {
  return (fs::path(dir) / ("fsdp_rank_" + std::to_string(rank) + "_of_" + std::to_string(world) + ".pt")).string();
}

torch::Tensor scalar(int64_t v) { return torch::tensor({v}, torch::kLong); }

}  // namespace

void FSDPEngine::save_checkpoint(const std::string& path, int64_t global_step, int64_t max_ckpt_to_keep) {
  if (!fsdp_ || !optimizer_) {
    throw EngineryError("save_checkpoint before initialize()", "fsdp engine, rank " + std::to_string(args_.rank));
  }
  fs::create_directories(path);
  torch::serialize::OutputArchive archive;
  archive.write("meta.world_size", scalar(args_.world_size));
  archive.write("meta.fsdp_size", scalar(groups_.shard->size()));
  archive.write("meta.strategy_fsdp2", scalar(args_.engine.strategy == "fsdp2"));
  archive.write("meta.global_step", scalar(global_step));
  auto& units = fsdp_->units();
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string u = std::to_string(i);
    archive.write("model.shard." + u, units[i].shard().cpu());
    archive.write("optim.exp_avg." + u, optimizer_->exp_avg()[i].cpu());
    archive.write("optim.exp_avg_sq." + u, optimizer_->exp_avg_sq()[i].cpu());
  }
  archive.write("optim.step", scalar(optimizer_->step_count()));
  archive.write("sched.step", scalar(lr_scheduler_ ? lr_scheduler_->current_step() : 0));
  if (sharded_scaler_) {
    archive.write("scaler.scale", sharded_scaler_->scale_state().cpu());
    archive.write("scaler.growth_tracker", sharded_scaler_->growth_tracker_state().cpu());
  }
  // Write to a temporary name first so a crash never leaves a truncated file under the real name.
  const std::string file = shard_file(path, args_.rank, args_.world_size);
  archive.save_to(file + ".tmp");
  fs::rename(file + ".tmp", file);
  groups_.world->barrier();

  saved_checkpoints_.push_back(path);
  while (max_ckpt_to_keep > 0 && static_cast<int64_t>(saved_checkpoints_.size()) > max_ckpt_to_keep) {
    const std::string oldest = saved_checkpoints_.front();
    saved_checkpoints_.pop_front();
    if (args_.rank == 0 && oldest != path) enginery::compat::remove_all(oldest);
  }
}

void FSDPEngine::load_checkpoint(const std::string& path) {
  if (!fsdp_ || !optimizer_) {
    throw EngineryError("load_checkpoint before initialize()", "fsdp engine, rank " + std::to_string(args_.rank));
  }
  const std::string file = shard_file(path, args_.rank, args_.world_size);
  if (!fs::exists(file)) {
    throw EngineryError("no shard file for this rank and world size: " + file,
                        "load_checkpoint, rank " + std::to_string(args_.rank),
                        "a checkpoint saved with world size " + std::to_string(args_.world_size));
  }
  torch::serialize::InputArchive archive;
  archive.load_from(file);
  auto read = [&](const std::string& key) {
    torch::Tensor t;
    archive.read(key, t);
    return t;
  };
  const bool fsdp2 = read("meta.strategy_fsdp2").item<int64_t>() != 0;
  if (fsdp2 != (args_.engine.strategy == "fsdp2") || read("meta.fsdp_size").item<int64_t>() != groups_.shard->size()) {
    throw EngineryError("checkpoint was saved with another sharding (strategy or fsdp_size)", file,
                        "the strategy and fsdp_size it was saved with");
  }
  torch::NoGradGuard no_grad;
  auto& units = fsdp_->units();
  for (size_t i = 0; i < units.size(); ++i) {
    const std::string u = std::to_string(i);
    auto shard = read("model.shard." + u);
    if (shard.numel() != units[i].shard().numel()) {
      throw EngineryError("shard " + u + " has " + std::to_string(shard.numel()) + " elements, the model " +
                              std::to_string(units[i].shard().numel()),
                          file, "a checkpoint of the same model");
    }
    units[i].shard().copy_(shard);
    optimizer_->exp_avg()[i].copy_(read("optim.exp_avg." + u));
    optimizer_->exp_avg_sq()[i].copy_(read("optim.exp_avg_sq." + u));
  }
  optimizer_->set_step_count(read("optim.step").item<int64_t>());
  if (lr_scheduler_) lr_scheduler_->set_current_step(read("sched.step").item<int64_t>());
  if (sharded_scaler_) {
    sharded_scaler_->scale_state().copy_(read("scaler.scale"));
    sharded_scaler_->growth_tracker_state().copy_(read("scaler.growth_tracker"));
  }
  fsdp_->zero_grad();
  groups_.world->barrier();
}

}  // namespace fsdp
}  // namespace enginery
