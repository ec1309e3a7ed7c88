// FSDPEngine: save_checkpoint / load_checkpoint / export_hf. The protocol (plugin/fsdp/CHECKPOINT.md):
//   1. rank 0 empties <parent>/.<name>.tmp; all agree it exists;
//   2. every writing rank streams its files into it (sha256 on the fly) and fsyncs them; an HSDP run writes the
//      model and optimizer from replica group 0 only, every rank writes its RNG state;
//   3. all ranks exchange success, sizes and digests; on any failure rank 0 removes the temporary directory and
//      every rank throws, the previous checkpoint untouched;
//   4. rank 0 writes metadata.json last, fsyncs the directory, renames it into place, fsyncs the parent; only then
//      retention removes old checkpoints (counted on disk, never the new one).
#include <filesystem>

#include "support/durable_fs.h"
#include "host_api/error.h"
#include "host_api/precision.h"
#include "models/model_factory.h"
#include "plugin/fsdp/checkpoint_extra.h"
#include "plugin/fsdp/checkpoint_files.h"
#include "plugin/fsdp/checkpoint_format.h"
#include "plugin/fsdp/checkpoint_plan.h"
#include "plugin/fsdp/checkpoint_reader.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {
namespace {

namespace fs = std::filesystem;

// The message of what `step` threw, "" when it succeeded: a rank's failure becomes a flag all ranks agree on
// (agree_or_throw) instead of an exception that would leave the others waiting in a collective.
std::string error_of(const std::function<void()>& step) {
  try {
    step();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

struct Contents {
  bool model = false, optimizer = false, extra = false, hf_model = false;
};

Contents parse_contents(const std::vector<std::string>& names, bool saving, const std::string& field) {
  Contents c;
  for (const auto& n : names) {
    if (n == "model") {
      c.model = true;
    } else if (n == "optimizer") {
      c.optimizer = true;
    } else if (n == "extra") {
      c.extra = true;
    } else if (n == "hf_model" && saving) {
      c.hf_model = true;
    } else {
      throw EngineryError("unknown checkpoint content '" + n + "'", field,
                          saving ? "model, optimizer, extra, hf_model" : "model, optimizer, extra");
    }
  }
  return c;
}

// The per-rank record exchanged after writing: [reserved, then per file slot: present, bytes, shard rank, 32 sha
// bytes]. Slots: model, optimizer, extra.
constexpr int64_t kSlots = 3;
constexpr int64_t kSlotWords = 3 + 32;
constexpr int64_t kRecordWords = 1 + kSlots * kSlotWords;

void put_slot(torch::Tensor& record, int64_t slot, const ckpt::FileInfo& f, int64_t shard_rank) {
  auto* w = record.data_ptr<int64_t>() + 1 + slot * kSlotWords;
  w[0] = 1;
  w[1] = static_cast<int64_t>(f.bytes);
  w[2] = shard_rank;
  for (int i = 0; i < 32; ++i) w[3 + i] = std::stoi(f.sha256.substr(2 * i, 2), nullptr, 16);
}

std::string sha_of_slot(const int64_t* w) {
  static const char* kDigits = "0123456789abcdef";
  std::string hex;
  for (int i = 0; i < 32; ++i) hex += kDigits[(w[3 + i] >> 4) & 0xf], hex += kDigits[w[3 + i] & 0xf];
  return hex;
}

nlohmann::json config_json(const EngineArgs& a, int64_t fsdp_size) {
  const MixedPrecisionConfig& mp = a.engine.mixed_precision;
  return {{"model", {{"path", a.model.path}, {"model_type", a.model_type}}},
          {"engine",
           {{"strategy", a.engine.strategy},
            {"fsdp_size", fsdp_size},
            {"param_dtype", PrecisionType::to_str(mp.param_dtype)},
            {"reduce_dtype", PrecisionType::to_str(mp.reduce_dtype)},
            {"seed", a.engine.seed}}},
          {"optim",
           {{"optimizer", a.optim.optimizer},
            {"lr", a.optim.lr},
            {"weight_decay", a.optim.weight_decay},
            {"betas", {a.optim.betas[0], a.optim.betas[1]}},
            {"eps", a.optim.eps},
            {"clip_grad", a.optim.clip_grad},
            {"lr_scheduler_type", a.optim.lr_scheduler_type},
            {"lr_warmup_steps", a.optim.lr_warmup_steps},
            {"total_training_steps", a.optim.total_training_steps}}},
          {"checkpoint", {{"save_contents", a.checkpoint.save_contents}}}};
}

}  // namespace

void FSDPEngine::require_sharded(const std::string& what) const {
  if (!fsdp_ || !optimizer_) {
    throw EngineryError(what + " before initialize() (or on an engine without FSDP units)",
                        "fsdp engine, rank " + std::to_string(args_.rank));
  }
}

void FSDPEngine::agree_or_throw(const std::string& error, const std::string& stage,
                                const std::function<void()>& on_failure) {
  const auto& world = world_collectives();
  auto flag = torch::full({1}, error.empty() ? 0.0f : static_cast<float>(world.rank() + 1),
                          torch::TensorOptions().dtype(torch::kFloat).device(device_));
  world.all_reduce(flag, ReduceOp::kMax);
  const auto failed = static_cast<int64_t>(flag.item<float>());
  if (failed == 0) return;
  if (on_failure) on_failure();
  world.barrier();  // nobody returns before the cleanup is done
  const std::string where = "fsdp engine, rank " + std::to_string(world.rank()) + ", " + stage;
  if (!error.empty()) throw EngineryError(error, where);
  throw EngineryError("rank " + std::to_string(failed - 1) + " failed (its own error names the cause)", where);
}

std::string FSDPEngine::write_hf_weights(const std::string& dir, int64_t max_shard_bytes) {
  const bool lead = world_collectives().rank() == 0;
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  get_per_tensor_param([&](const std::string& name, const torch::Tensor& full) {
    if (lead) weights.emplace_back(name, full.to(torch::kCPU));
  });
  if (!lead) return {};
  try {
    models::save_hf(*model_, dir, weights, max_shard_bytes);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

void FSDPEngine::export_hf(const std::string& dir, int64_t max_shard_bytes) {
  require_sharded("export_hf");
  const bool lead = world_collectives().rank() == 0;
  const fs::path final_path(dir), tmp = durable::temp_dir_for(final_path);
  agree_or_throw(lead ? error_of([&] { durable::fresh_dir(tmp); }) : "", "export_hf " + dir, {});
  std::string error = write_hf_weights(tmp.string(), max_shard_bytes);
  if (lead && error.empty()) {
    error = error_of([&] {
      durable::sync_path(tmp);
      for (const auto& entry : fs::directory_iterator(tmp)) durable::sync_path(entry.path());
      durable::publish_dir(tmp, final_path);
    });
  }
  agree_or_throw(error, "export_hf " + dir, [&] {
    std::error_code ec;
    if (lead) compat::remove_all(tmp, ec);
  });
}

void FSDPEngine::save_checkpoint(const std::string& path, int64_t global_step, int64_t max_ckpt_to_keep) {
  require_sharded("save_checkpoint");
  const Contents contents = parse_contents(args_.checkpoint.save_contents, true, "checkpoint.save_contents");
  const auto& world = world_collectives();
  const bool lead = world.rank() == 0;
  const fs::path final_path(path), tmp = durable::temp_dir_for(final_path);
  auto remove_tmp = [&] {
    std::error_code ec;
    if (lead) compat::remove_all(tmp, ec);
  };

  // 1. The temporary directory.
  agree_or_throw(lead ? error_of([&] { durable::fresh_dir(tmp); }) : "", "save_checkpoint " + path, {});
  std::string error;

  // 2. This rank's files.
  ckpt::CheckpointPlan plan(*fsdp_, *model_);
  const bool writes_shards = groups_.replicate->rank() == 0;
  const int64_t shard_rank = groups_.shard->rank();
  const int64_t rank = world.rank();
  auto record = torch::zeros({kRecordWords}, torch::kLong);
  std::vector<torch::Tensor> shards;
  for (auto& u : fsdp_->units()) shards.push_back(u.shard());
  auto write_data = [&](int64_t slot, const std::string& name, const std::vector<std::string>& states,
                        const std::vector<std::vector<torch::Tensor>>& tensors) {
    ckpt::FileWriter file((tmp / name).string());
    ckpt::FileInfo info;
    plan.write_file(file, states, tensors, shard_rank);
    info.bytes = file.bytes();
    info.sha256 = file.finish();
    put_slot(record, slot, info, shard_rank);
  };
  try {
    if (writes_shards && contents.model) write_data(0, ckpt::model_file_name(rank), {ckpt::kStateParam}, {shards});
    if (writes_shards && contents.optimizer) {
      write_data(1, ckpt::optim_file_name(rank), {ckpt::kStateExpAvg, ckpt::kStateExpAvgSq},
                 {optimizer_->exp_avg(), optimizer_->exp_avg_sq()});
    }
    if (contents.extra) {
      const std::string text = ckpt::capture_rng(device_).dump() + "\n";
      ckpt::FileWriter file((tmp / ckpt::extra_file_name(rank)).string());
      file.append(text.data(), text.size());
      ckpt::FileInfo info;
      info.bytes = file.bytes();
      info.sha256 = file.finish();
      put_slot(record, 2, info, shard_rank);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (contents.hf_model) {
    const std::string hf_error = write_hf_weights((tmp / ckpt::kHfDir).string(), kHfShardBytes);
    if (error.empty()) error = hf_error;
  }

  // 3. Sizes and digests of every rank, then whether all succeeded.
  auto records = torch::zeros({world.size() * kRecordWords}, torch::TensorOptions().dtype(torch::kLong).device(device_));
  world.all_gather_into(records, record.to(device_));
  records = records.cpu();
  const int64_t* all = records.data_ptr<int64_t>();
  agree_or_throw(error, "save_checkpoint " + path, remove_tmp);

  // 4. Metadata last, publish, retention.
  if (lead) {
    try {
      ckpt::Metadata meta;
      meta.global_step = global_step;
      meta.world_size = world.size();
      meta.fsdp_size = groups_.shard->size();
      meta.strategy = layout_name(layout_);
      if (contents.model) meta.contents.push_back("model");
      if (contents.optimizer) meta.contents.push_back("optimizer");
      if (contents.extra) meta.contents.push_back("extra");
      if (contents.hf_model) meta.contents.push_back("hf_model");
      meta.params = plan.params();
      meta.state = {{"optimizer", {{"step", optimizer_->step_count()}}},
                    {"lr_scheduler", {{"step", lr_scheduler_ ? lr_scheduler_->current_step() : 0}}}};
      if (ShardedGradScaler* scaler = sharded_grad_scaler()) {
        meta.state["grad_scaler"] = {
            {"scale", static_cast<double>(scaler->scale_state().cpu().item<float>())},
            {"growth_tracker", scaler->growth_tracker_state().cpu().to(torch::kLong).item<int64_t>()}};
      }
      meta.config = config_json(args_, groups_.shard->size());
      const char* kContent[kSlots] = {"model", "optimizer", "extra"};
      for (int64_t r = 0; r < world.size(); ++r) {
        for (int64_t slot = 0; slot < kSlots; ++slot) {
          const int64_t* w = all + r * kRecordWords + 1 + slot * kSlotWords;
          if (w[0] == 0) continue;
          ckpt::FileInfo f;
          f.content = kContent[slot];
          f.rank = r;
          f.bytes = static_cast<uint64_t>(w[1]);
          f.sha256 = sha_of_slot(w);
          if (slot == 0) {
            f.name = ckpt::model_file_name(r);
            f.segments = plan.file_segments({ckpt::kStateParam}, w[2]);
          } else if (slot == 1) {
            f.name = ckpt::optim_file_name(r);
            f.segments = plan.file_segments({ckpt::kStateExpAvg, ckpt::kStateExpAvgSq}, w[2]);
          } else {
            f.name = ckpt::extra_file_name(r);
          }
          meta.files.push_back(std::move(f));
        }
      }
      durable::write_file(tmp / ckpt::kMetadataFile, ckpt::to_json(meta).dump(1) + "\n");
      if (contents.hf_model) {
        for (const auto& entry : fs::directory_iterator(tmp / ckpt::kHfDir)) durable::sync_path(entry.path());
        durable::sync_path(tmp / ckpt::kHfDir);
      }
      durable::publish_dir(tmp, final_path);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_or_throw(error, "save_checkpoint " + path, remove_tmp);
  if (lead) {
    error = error_of([&] { durable::retain_newest(final_path, max_ckpt_to_keep, ckpt::kMetadataFile); });
    if (!error.empty()) error = "checkpoint saved, but removing old ones failed: " + error;
  }
  agree_or_throw(error, "save_checkpoint retention " + path, {});
}

void FSDPEngine::load_checkpoint(const std::string& path) {
  require_sharded("load_checkpoint");
  const Contents contents = parse_contents(args_.checkpoint.load_contents, false, "checkpoint.load_contents");
  const auto& world = world_collectives();
  std::string error;
  try {
    ckpt::CheckpointPlan plan(*fsdp_, *model_);
    ckpt::CheckpointReader reader(path, ckpt::read_metadata(path), plan);
    const ckpt::Metadata& meta = reader.metadata();
    const std::string where = (fs::path(path) / ckpt::kMetadataFile).string();
    auto require = [&](bool wanted, const char* content) {
      if (wanted && !meta.has(content)) {
        throw EngineryError(std::string("checkpoint.load_contents asks for '") + content +
                                "' but the checkpoint was saved without it",
                            where, "load_contents within what was saved");
      }
      return wanted;
    };
    const int64_t shard_rank = groups_.shard->rank();
    if (require(contents.model, "model")) {
      std::vector<torch::Tensor> shards;
      for (auto& u : fsdp_->units()) shards.push_back(u.shard());
      reader.read_state(ckpt::kStateParam, shards, *fsdp_, shard_rank);
    }
    if (require(contents.optimizer, "optimizer")) {
      reader.read_state(ckpt::kStateExpAvg, optimizer_->exp_avg(), *fsdp_, shard_rank);
      reader.read_state(ckpt::kStateExpAvgSq, optimizer_->exp_avg_sq(), *fsdp_, shard_rank);
      optimizer_->set_step_count(meta.state.at("optimizer").at("step").get<int64_t>());
    }
    if (require(contents.extra, "extra")) {
      if (lr_scheduler_) lr_scheduler_->set_current_step(meta.state.at("lr_scheduler").at("step").get<int64_t>());
      ShardedGradScaler* scaler = sharded_grad_scaler();
      if (scaler && meta.state.contains("grad_scaler")) {
        const auto& s = meta.state.at("grad_scaler");
        scaler->scale_state().fill_(s.at("scale").get<double>());
        scaler->growth_tracker_state().fill_(s.at("growth_tracker").get<int64_t>());
      }
      // Same world size: each rank its own generator; otherwise rank r takes saved rank r mod the old size (a
      // resharded run continues from valid states but cannot reproduce the unsharded sequence anyway).
      const std::string name = ckpt::extra_file_name(world.rank() % meta.world_size);
      ckpt::restore_rng(nlohmann::json::parse(reader.read_text(name)), device_, (fs::path(path) / name).string());
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_or_throw(error, "load_checkpoint " + path, {});
  fsdp_->zero_grad();
}

}  // namespace fsdp
}  // namespace enginery
