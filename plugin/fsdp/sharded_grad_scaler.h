#pragma once
// The sharded gradient scaler (docs/ARCHITECTURE.md, "Precision"): torch.amp.GradScaler's algorithm over the fp32 shard gradients, with
// found_inf agreed (MAX) over the whole data-parallel group so every rank skips the same steps.
#include <torch/torch.h>

#include <vector>

#include "host_api/config.h"
#include "host_api/grad_scaler.h"
#include "plugin/fsdp/collectives.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

class ENGINERY_FSDP_API ShardedGradScaler : public GradScaler {
 public:
  ShardedGradScaler(const GradScalerConfig& config, const torch::Device& device);
  ~ShardedGradScaler() override;

  torch::Tensor scale(const torch::Tensor& loss) override;
  double current_scale() const override;
  int64_t growth_tracker() const override;
  bool last_step_skipped() const override { return last_step_skipped_; }
  double growth_factor() const override { return growth_factor_; }
  double backoff_factor() const override { return backoff_factor_; }
  int64_t growth_interval() const override { return growth_interval_; }

  // [Note: scaler found-inf agreement] (docs/ARCHITECTURE.md, "Precision") found_inf is all-reduced MAX over the
  // whole data-parallel group before anyone reads it, in unscale_ and in record_found_inf alike: every rank then
  // skips or steps together and updates the same scale. A rank deciding from its own shard would step while another
  // skips, and the replicas' parameters and scales would drift apart for good.
  // Multiplies `grads` by 1/scale in place and records whether any rank of `dp_group` saw inf/nan (collective).
  void unscale_(const std::vector<torch::Tensor>& grads, const Collectives& dp_group);
  // The offloaded step's unscale_ (its gradients are on the host, their norms on the device): records `non_finite`
  // (fp32 [1], > 0 where this rank's gradients hold an inf or nan) agreed MAX over `dp_group`; the step multiplies
  // each staged gradient by inv_scale() itself.
  void record_found_inf(const torch::Tensor& non_finite, const Collectives& dp_group);
  torch::Tensor inv_scale() const;  // fp32 [1], as unscale_ computes it
  // The one host sync of a step: whether the optimizer must skip. Call after unscale_ (or record_found_inf).
  bool should_skip();
  // Backoff on found_inf, growth after growth_interval clean steps (ATen's _amp_update_scale_).
  void update();

  // Checkpoint state.
  torch::Tensor& scale_state() { return scale_; }
  torch::Tensor& growth_tracker_state() { return growth_tracker_; }

 private:
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  torch::Tensor scale_;           // [1] fp32
  torch::Tensor growth_tracker_;  // [1] int32
  torch::Tensor found_inf_;       // [1] fp32
  bool last_step_skipped_ = false;
};

}  // namespace fsdp
}  // namespace enginery
