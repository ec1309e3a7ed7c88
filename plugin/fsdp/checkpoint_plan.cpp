#include "plugin/fsdp/checkpoint_plan.h"

#include "host_api/error.h"
#include "plugin/fsdp/hf_param_names.h"

namespace enginery {
namespace fsdp {
namespace ckpt {

CheckpointPlan::CheckpointPlan(FsdpModule& fsdp, models::DecoderModel& model) : fsdp_(fsdp) {
  // The table uses the model's own (Hugging Face) names, as get_per_tensor_param does.
  const HfParamNames hf_names(model);
  for (auto& unit : fsdp_.units()) {
    std::vector<size_t> ids;
    for (size_t i = 0; i < unit.params().size(); ++i) {
      ids.push_back(params_.size());
      params_.push_back({hf_names.of(unit, i), unit.layout().shape(i), "float32"});
    }
    unit_params_.push_back(std::move(ids));
  }
}

std::vector<Segment> CheckpointPlan::file_segments(const std::vector<std::string>& states, int64_t shard_rank) const {
  std::vector<Segment> out;
  uint64_t offset = 0;
  for (const auto& state : states) {
    for (size_t u = 0; u < unit_params_.size(); ++u) {
      for (const ShardRange& r : fsdp_.units()[u].layout().owned_ranges(shard_rank)) {
        out.push_back({unit_params_[u][r.param], state, r.begin, r.end, offset});
        offset += static_cast<uint64_t>(r.end - r.begin) * sizeof(float);
      }
    }
  }
  return out;
}

std::vector<Segment> CheckpointPlan::write_file(FileWriter& file, const std::vector<std::string>& states,
                                                const std::vector<std::vector<torch::Tensor>>& per_state,
                                                int64_t shard_rank) const {
  torch::NoGradGuard no_grad;
  std::vector<Segment> segments = file_segments(states, shard_rank);
  size_t next = 0;
  for (size_t k = 0; k < states.size(); ++k) {
    for (size_t u = 0; u < unit_params_.size(); ++u) {
      for (const ShardRange& r : fsdp_.units()[u].layout().owned_ranges(shard_rank)) {
        const auto piece = per_state[k].at(u).narrow(0, r.shard_offset, r.end - r.begin).to(torch::kFloat);
        const uint64_t at = file.append(piece);
        if (at != segments.at(next).offset) {
          throw EngineryError("the file map and the writer disagree at offset " + std::to_string(at), "checkpoint plan");
        }
        ++next;
      }
    }
  }
  return segments;
}

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
