// FSDPEngine: save_checkpoint / load_checkpoint (export_hf: fsdp_hf_export.cpp). The protocol
// (plugin/fsdp/CHECKPOINT.md):
//   1. rank 0 empties <parent>/.<name>.tmp; all agree it exists;
//   2. every writing rank streams its files into it (sha256 on the fly) and fsyncs them; an HSDP run writes the
//      model and optimizer from replica group 0 only, every rank writes its RNG state;
//   3. all ranks exchange success, sizes and digests (checkpoint_record.h); on any failure rank 0 removes the
//      temporary directory and every rank throws, the previous checkpoint untouched;
//   4. rank 0 writes metadata.json last, fsyncs the directory, renames it into place, fsyncs the parent; only then
//      retention removes old checkpoints (counted on disk, never the new one).
#include <algorithm>
#include <filesystem>
#include <set>

#include "support/durable_fs.h"
#include "support/list_text.h"
#include "host_api/error.h"
#include "engine_driver/precision.h"
#include "models/model_factory.h"
#include "plugin/fsdp/checkpoint_extra.h"
#include "plugin/fsdp/checkpoint_files.h"
#include "plugin/fsdp/checkpoint_format.h"
#include "plugin/fsdp/checkpoint_plan.h"
#include "plugin/fsdp/checkpoint_reader.h"
#include "plugin/fsdp/checkpoint_record.h"
#include "plugin/fsdp/failure_agreement.h"
#include "plugin/fsdp/fsdp_engine.h"

namespace enginery {
namespace fsdp {
namespace {

namespace fs = std::filesystem;

struct Contents {
  bool model = false, optimizer = false, extra = false, hf_model = false;
};

// A save may also ask for hf_model; a load reads per-rank files only.
Contents parse_contents(const std::vector<std::string>& names, bool saving, const std::string& field) {
  const std::vector<std::string>& allowed = saving ? ckpt::all_contents() : ckpt::file_contents();
  Contents c;
  for (const auto& n : names) {
    if (std::find(allowed.begin(), allowed.end(), n) == allowed.end()) {
      throw EngineryError("unknown checkpoint content '" + n + "'", field, join_list(allowed));
    }
    c.model = c.model || n == kContentModel;
    c.optimizer = c.optimizer || n == kContentOptimizer;
    c.extra = c.extra || n == kContentExtra;
    c.hf_model = c.hf_model || n == kContentHfModel;
  }
  return c;
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

std::vector<std::string> content_names(const Contents& c) {
  std::vector<std::string> names;
  if (c.model) names.push_back(kContentModel);
  if (c.optimizer) names.push_back(kContentOptimizer);
  if (c.extra) names.push_back(kContentExtra);
  if (c.hf_model) names.push_back(kContentHfModel);
  return names;
}

// How a kind of per-rank file appears in the checkpoint: its metadata.json content, its file name and the
// per-parameter states it holds (none for the extra file, which holds RNG states as JSON).
struct FileFormat {
  const char* content;
  std::string (*file_name)(int64_t rank);
  std::vector<std::string> states;
};

const FileFormat& format_of(ckpt::FileKind kind) {
  static const FileFormat kModel{kContentModel, ckpt::model_file_name, {ckpt::kStateParam}};
  static const FileFormat kOptimizer{kContentOptimizer, ckpt::optim_file_name,
                                     {ckpt::kStateExpAvg, ckpt::kStateExpAvgSq}};
  static const FileFormat kExtra{kContentExtra, ckpt::extra_file_name, {}};
  switch (kind) {
    case ckpt::FileKind::kModel: return kModel;
    case ckpt::FileKind::kOptimizer: return kOptimizer;
    case ckpt::FileKind::kExtra: break;
  }
  return kExtra;
}

// What one rank saves in save_checkpoint's step 2.
struct RankFiles {
  int64_t world_rank = 0;
  int64_t shard_rank = 0;      // the data files hold this shard rank's ranges
  bool writes_shards = false;  // HSDP: only replica group 0 writes model and optimizer (replicas hold the same)
  std::vector<torch::Tensor> params;  // every unit's fp32 master shard
  AdamW* optimizer = nullptr;
  torch::Device device = torch::kCPU;  // whose RNG the extra file saves besides the CPU's
};

ckpt::FileRecord write_data_file(const fs::path& dir, ckpt::FileKind kind, const ckpt::CheckpointPlan& plan,
                                 const std::vector<std::vector<torch::Tensor>>& per_state, const RankFiles& rank) {
  const FileFormat& format = format_of(kind);
  ckpt::FileWriter file((dir / format.file_name(rank.world_rank)).string());
  plan.write_file(file, format.states, per_state, rank.shard_rank);
  const uint64_t bytes = file.bytes();
  return ckpt::FileRecord::written_file(bytes, file.finish(), rank.shard_rank);
}

ckpt::FileRecord write_extra_file(const fs::path& dir, const RankFiles& rank) {
  const std::string text = ckpt::capture_rng(rank.device).dump() + "\n";
  ckpt::FileWriter file((dir / format_of(ckpt::FileKind::kExtra).file_name(rank.world_rank)).string());
  file.append(text.data(), text.size());
  const uint64_t bytes = file.bytes();
  return ckpt::FileRecord::written_file(bytes, file.finish(), rank.shard_rank);
}

// Step 2: this rank's files in `dir`, and what it wrote.
ckpt::RankRecord write_rank_files(const fs::path& dir, const Contents& contents, const ckpt::CheckpointPlan& plan,
                                  const RankFiles& rank) {
  ckpt::RankRecord record;
  if (rank.writes_shards && contents.model) {
    record[ckpt::FileKind::kModel] = write_data_file(dir, ckpt::FileKind::kModel, plan, {rank.params}, rank);
  }
  if (rank.writes_shards && contents.optimizer) {
    record[ckpt::FileKind::kOptimizer] = write_data_file(
        dir, ckpt::FileKind::kOptimizer, plan, {rank.optimizer->exp_avg(), rank.optimizer->exp_avg_sq()}, rank);
  }
  if (contents.extra) record[ckpt::FileKind::kExtra] = write_extra_file(dir, rank);
  return record;
}

// metadata.json's file table: every file every rank wrote, by world rank then kind. Any rank's data file map
// follows from the plan and the shard rank it holds.
std::vector<ckpt::FileInfo> file_table(const std::vector<ckpt::RankRecord>& records, const ckpt::CheckpointPlan& plan) {
  std::vector<ckpt::FileInfo> files;
  for (int64_t r = 0; r < static_cast<int64_t>(records.size()); ++r) {
    for (ckpt::FileKind kind : ckpt::kFileKinds) {
      const ckpt::FileRecord& written = records[r][kind];
      if (!written.written) continue;
      const FileFormat& format = format_of(kind);
      ckpt::FileInfo f;
      f.name = format.file_name(r);
      f.content = format.content;
      f.rank = r;
      f.bytes = written.bytes;
      f.sha256 = written.sha256;
      if (!format.states.empty()) f.segments = plan.file_segments(format.states, written.shard_rank);
      files.push_back(std::move(f));
    }
  }
  return files;
}

// The training state a checkpoint restores besides the tensors (metadata.json "state").
nlohmann::json training_state(const AdamW& optimizer, const LrScheduler* lr_scheduler, ShardedGradScaler* scaler) {
  nlohmann::json state = {{"optimizer", {{"step", optimizer.step_count()}}},
                          {"lr_scheduler", {{"step", lr_scheduler ? lr_scheduler->current_step() : 0}}}};
  if (scaler) {
    state["grad_scaler"] = {
        {"scale", static_cast<double>(scaler->scale_state().cpu().item<float>())},
        {"growth_tracker", scaler->growth_tracker_state().cpu().to(torch::kLong).item<int64_t>()}};
  }
  return state;
}

// What a save may replace at `dir`: nothing, an empty directory, or an earlier checkpoint holding only what its
// save wrote (metadata.json names every file; huggingface/ with hf_model). Replacing removes the whole directory,
// so anything else in it would be lost.
void check_replaceable(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return;
  const std::string where = "save_checkpoint";
  const std::string allowed = "a new or empty directory, or an earlier enginery checkpoint holding only its own files";
  if (!fs::is_directory(dir, ec)) throw EngineryError(dir.string() + " exists and is not a directory", where, allowed);
  if (fs::is_empty(dir, ec)) return;
  if (!fs::exists(dir / ckpt::kMetadataFile, ec)) {
    throw EngineryError(dir.string() + " holds files enginery did not write (no " + ckpt::kMetadataFile +
                            "): saving there would replace them",
                        where, allowed);
  }
  ckpt::Metadata previous;
  try {
    previous = ckpt::read_metadata(dir.string());
  } catch (const EngineryError& e) {
    throw EngineryError(dir.string() + " holds a " + ckpt::kMetadataFile + " that cannot be read, so which of its " +
                            "files an earlier save wrote is unknown: " + e.what(),
                        where, allowed);
  }
  std::set<std::string> ours = {ckpt::kMetadataFile};
  for (const ckpt::FileInfo& f : previous.files) ours.insert(f.name);
  if (previous.has(kContentHfModel)) ours.insert(ckpt::kHfDir);
  const std::vector<std::string> foreign = durable::foreign_entries(dir, ours);
  if (!foreign.empty()) {
    std::string names;
    for (const auto& n : foreign) names += (names.empty() ? "" : ", ") + n;
    throw EngineryError(dir.string() + " holds files its checkpoint did not write (" + names +
                            "): replacing the checkpoint would delete them; move them out first",
                        where, allowed);
  }
}

// Step 4 (rank 0): metadata.json last, the Hugging Face files synced, then the directory renamed into place.
void publish_checkpoint(const fs::path& tmp, const fs::path& final_path, const ckpt::Metadata& meta,
                        bool hf_model) {
  durable::write_file(tmp / ckpt::kMetadataFile, ckpt::to_json(meta).dump(1) + "\n");
  if (hf_model) {
    for (const auto& entry : fs::directory_iterator(tmp / ckpt::kHfDir)) durable::sync_path(entry.path());
    durable::sync_path(tmp / ckpt::kHfDir);
  }
  durable::publish_dir(tmp, final_path);
}

}  // namespace

void FSDPEngine::require_sharded(const std::string& what) const {
  require_trainable(what);  // verl never checkpoints its reference policy; its state is the model path's
  if (!fsdp_ || !optimizer_) {
    throw EngineryError(what + " before initialize()",
                        "fsdp engine, rank " + std::to_string(args_.rank));
  }
  require_resident(what, true, true, true);  // collectives and files read the state where the engine computes
}

void FSDPEngine::save_checkpoint(const std::string& path, int64_t global_step, int64_t max_ckpt_to_keep) {
  require_sharded("save_checkpoint");
  const Contents contents = parse_contents(args_.checkpoint.save_contents, true, "checkpoint.save_contents");
  const auto& world = world_collectives();
  const bool lead = world.rank() == 0;
  const fs::path final_path(path), tmp = durable::temp_dir_for(final_path);
  const std::string stage = "save_checkpoint " + path;
  auto remove_tmp = [&] {
    std::error_code ec;
    if (lead) compat::remove_all(tmp, ec);
  };

  // 1. What a killed save, replacement or retention left in this directory is finished first (so a set-aside
  // checkpoint is back before it is judged); then the temporary directory, once the destination is known to hold
  // nothing of the user's.
  agree(lead ? error_of([&] {
    durable::finish_interrupted(final_path);
    durable::finish_interrupted_checkpoints(final_path.parent_path());
    check_replaceable(final_path);
    durable::fresh_dir(tmp);
  }) : "", stage, {});

  // 2. This rank's files. The Hugging Face weights are gathered even after a failure: every rank takes part.
  ckpt::CheckpointPlan plan(*fsdp_, *model_);
  RankFiles rank;
  rank.world_rank = world.rank();
  rank.shard_rank = groups_.shard->rank();
  rank.writes_shards = groups_.replicate->rank() == 0;
  for (const auto& u : fsdp_->units()) rank.params.push_back(u.shard());  // read only: the compute copies stay
  rank.optimizer = optimizer_.get();
  rank.device = device_;
  ckpt::RankRecord record;
  std::string error = error_of([&] { record = write_rank_files(tmp, contents, plan, rank); });
  if (contents.hf_model) {
    const std::string hf_error = write_hf_weights((tmp / ckpt::kHfDir).string(), kHfShardBytes);
    if (error.empty()) error = hf_error;
  }

  // 3. Sizes and digests of every rank, then whether all succeeded.
  const std::vector<ckpt::RankRecord> records = ckpt::all_gather_records(world, record, device_);
  agree(error, stage, remove_tmp);

  // 4. Metadata last, publish.
  if (lead) {
    error = error_of([&] {
      ckpt::Metadata meta;
      meta.global_step = global_step;
      meta.world_size = world.size();
      meta.fsdp_size = groups_.shard->size();
      meta.strategy = layout_name(layout_);
      meta.contents = content_names(contents);
      meta.params = plan.params();
      meta.files = file_table(records, plan);
      meta.state = training_state(*optimizer_, lr_scheduler_.get(), sharded_grad_scaler());
      meta.config = config_json(args_, groups_.shard->size());
      publish_checkpoint(tmp, final_path, meta, contents.hf_model);
    });
  }
  agree(error, stage, remove_tmp);

  // 5. Retention, counted on disk, never the new checkpoint.
  if (lead) {
    error = error_of([&] { durable::retain_newest(final_path, max_ckpt_to_keep, ckpt::kMetadataFile); });
    if (!error.empty()) error = "checkpoint saved, but removing old ones failed: " + error;
  }
  agree(error, "save_checkpoint retention " + path, {});
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
    // Every fault this rank can find (coverage, missing or corrupt files, the RNG file's JSON) before any tensor
    // changes: a failed load leaves the engine as it was.
    if (require(contents.model, kContentModel)) reader.check_state(ckpt::kStateParam, *fsdp_, shard_rank);
    if (require(contents.optimizer, kContentOptimizer)) {
      reader.check_state(ckpt::kStateExpAvg, *fsdp_, shard_rank);
      reader.check_state(ckpt::kStateExpAvgSq, *fsdp_, shard_rank);
    }
    // Same world size: each rank its own generator; otherwise rank r takes saved rank r mod the old size (a
    // resharded run continues from valid states but cannot reproduce the unsharded sequence anyway).
    const std::string rng_name = ckpt::extra_file_name(world.rank() % meta.world_size);
    const std::string rng_path = (fs::path(path) / rng_name).string();
    nlohmann::json rng;
    if (require(contents.extra, kContentExtra)) {
      try {
        rng = nlohmann::json::parse(reader.read_text(rng_name));
      } catch (const nlohmann::json::exception& e) {
        throw EngineryError(std::string("RNG state is not valid JSON: ") + e.what(), rng_path);
      }
    }
    if (contents.model) {
      std::vector<torch::Tensor> shards;
      for (auto& u : fsdp_->units()) shards.push_back(u.shard());
      reader.read_state(ckpt::kStateParam, shards, *fsdp_, shard_rank);
    }
    if (contents.optimizer) {
      reader.read_state(ckpt::kStateExpAvg, optimizer_->exp_avg(), *fsdp_, shard_rank);
      reader.read_state(ckpt::kStateExpAvgSq, optimizer_->exp_avg_sq(), *fsdp_, shard_rank);
      optimizer_->set_step_count(meta.state.at("optimizer").at("step").get<int64_t>());
    }
    if (contents.extra) {
      if (lr_scheduler_) lr_scheduler_->set_current_step(meta.state.at("lr_scheduler").at("step").get<int64_t>());
      ShardedGradScaler* scaler = sharded_grad_scaler();
      if (scaler && meta.state.contains("grad_scaler")) {
        const auto& s = meta.state.at("grad_scaler");
        scaler->scale_state().fill_(s.at("scale").get<double>());
        scaler->growth_tracker_state().fill_(s.at("growth_tracker").get<int64_t>());
      }
      ckpt::restore_rng(rng, device_, rng_path);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(error, "load_checkpoint " + path, {});
  fsdp_->drop_prefetched();  // uploads of the masters before the load are stale
  fsdp_->zero_grad();
}

}  // namespace fsdp
}  // namespace enginery
