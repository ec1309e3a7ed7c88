#pragma once
// Which bytes a rank writes and reads: the engine's units and parameters seen as the checkpoint's parameter
// table (Hugging Face names, full shapes) and, per unit, the element ranges a shard rank owns.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "models/decoder_model.h"
#include "plugin/fsdp/checkpoint_format.h"
#include "plugin/fsdp/checkpoint_files.h"
#include "plugin/fsdp/fsdp_module.h"

namespace enginery {
namespace fsdp {
namespace ckpt {

class CheckpointPlan {
 public:
  CheckpointPlan(FsdpModule& fsdp, models::DecoderModel& model);

  const std::vector<ParamInfo>& params() const { return params_; }
  // Global parameter index of unit u's i-th parameter.
  size_t param_id(size_t unit, size_t i) const { return unit_params_[unit][i]; }
  size_t num_units() const { return unit_params_.size(); }

  // The segments of a data file that holds `states` for shard rank `shard_rank`, in file order: per state, per
  // unit, per owned range, float32 back to back. Any rank can compute any writer's file map from this.
  std::vector<Segment> file_segments(const std::vector<std::string>& states, int64_t shard_rank) const;

  // Writes that file: `per_state[k]` holds states[k] of every unit (tensors laid out like the unit's shard).
  // Returns its segments.
  std::vector<Segment> write_file(FileWriter& file, const std::vector<std::string>& states,
                                  const std::vector<std::vector<torch::Tensor>>& per_state, int64_t shard_rank) const;

 private:
  FsdpModule& fsdp_;
  std::vector<ParamInfo> params_;
  std::vector<std::vector<size_t>> unit_params_;
};

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
