#include "plugin/fsdp/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "host_api/error.h"

namespace enginery {
namespace fsdp {
namespace ckpt {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream out;
  out << c10::IntArrayRef(s);
  return out.str();
}

}  // namespace

CheckpointReader::CheckpointReader(std::string dir, Metadata meta, const CheckpointPlan& plan)
    : dir_(std::move(dir)), meta_(std::move(meta)), plan_(plan) {
  const std::string where = (std::filesystem::path(dir_) / kMetadataFile).string();
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < meta_.params.size(); ++i) by_name.emplace(meta_.params[i].name, i);
  for (const auto& p : plan_.params()) {
    auto it = by_name.find(p.name);
    if (it == by_name.end()) {
      throw EngineryError("the checkpoint has no parameter '" + p.name + "'", where, "a checkpoint of the same model");
    }
    if (meta_.params[it->second].shape != p.shape) {
      throw EngineryError("parameter '" + p.name + "' has shape " + shape_str(meta_.params[it->second].shape) +
                              " in the checkpoint, " + shape_str(p.shape) + " in this model",
                          where, "a checkpoint of the same model");
    }
    param_of_plan_.push_back(it->second);
  }
  if (meta_.params.size() != plan_.params().size()) {
    throw EngineryError("the checkpoint has " + std::to_string(meta_.params.size()) + " parameters, this model " +
                            std::to_string(plan_.params().size()),
                        where, "a checkpoint of the same model");
  }
  for (size_t f = 0; f < meta_.files.size(); ++f) {
    for (const auto& s : meta_.files[f].segments) index_[{s.param, s.state}].push_back({f, s.begin, s.end, s.offset});
  }
}

const MappedFile& CheckpointReader::file(size_t index) {
  auto& slot = mapped_[index];
  if (!slot) {
    const FileInfo& info = meta_.files.at(index);
    slot = std::make_unique<MappedFile>((std::filesystem::path(dir_) / info.name).string(), info.bytes, info.sha256);
  }
  return *slot;
}

void CheckpointReader::visit_pieces(const std::string& state, FsdpModule& fsdp, int64_t shard_rank,
                                    const PieceFn& piece) {
  for (size_t u = 0; u < fsdp.units().size(); ++u) {
    for (const ShardRange& r : fsdp.units()[u].layout().owned_ranges(shard_rank)) {
      const size_t param = param_of_plan_[plan_.param_id(u, r.param)];
      // The stored pieces of r, checked to tile it exactly (by position: two copies of one half are not the
      // whole) before a byte is used.
      std::vector<std::pair<int64_t, int64_t>> pieces;
      std::vector<const Stored*> sources;
      auto it = index_.find({param, state});
      if (it != index_.end()) {
        for (const Stored& s : it->second) {
          const int64_t a = std::max(r.begin, s.begin), b = std::min(r.end, s.end);
          if (a >= b) continue;
          pieces.emplace_back(a, b);
          sources.push_back(&s);
        }
      }
      if (const auto fault = tiling_fault(pieces, r.begin, r.end)) {
        throw EngineryError("element " + std::to_string(fault->element) + " of '" + meta_.params[param].name + "' (" +
                                state + ") is " + (fault->twice ? "stored twice" : "stored in no file"),
                            (std::filesystem::path(dir_) / kMetadataFile).string(),
                            "a checkpoint whose files are all listed and present, each element stored once");
      }
      for (size_t i = 0; i < pieces.size(); ++i) {
        piece(u, r, pieces[i].first, pieces[i].second, *sources[i], file(sources[i]->file));
      }
    }
  }
}

void CheckpointReader::check_state(const std::string& state, FsdpModule& fsdp, int64_t shard_rank) {
  visit_pieces(state, fsdp, shard_rank,
               [](size_t, const ShardRange&, int64_t, int64_t, const Stored&, const MappedFile&) {});
}

void CheckpointReader::read_state(const std::string& state, std::vector<torch::Tensor>& per_unit, FsdpModule& fsdp,
                                  int64_t shard_rank) {
  torch::NoGradGuard no_grad;
  for (auto& dst : per_unit) dst.zero_();  // padding
  visit_pieces(state, fsdp, shard_rank,
               [&](size_t u, const ShardRange& r, int64_t a, int64_t b, const Stored& s, const MappedFile& f) {
                 auto src = f.floats(s.offset + static_cast<uint64_t>(a - s.begin) * sizeof(float), b - a);
                 per_unit.at(u).narrow(0, r.shard_offset + (a - r.begin), b - a).copy_(src);
               });
}

std::string CheckpointReader::read_text(const std::string& name) {
  for (size_t f = 0; f < meta_.files.size(); ++f) {
    if (meta_.files[f].name != name) continue;
    return file(f).text();
  }
  throw EngineryError("metadata.json lists no file '" + name + "'", (std::filesystem::path(dir_) / kMetadataFile).string());
}

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
