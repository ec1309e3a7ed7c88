#pragma once
// The sharded model: one FsdpUnit per models::Unit over the process groups (process_groups.h), and the UnitHooks
// the model calls around each unit (docs/ARCHITECTURE.md, "One step"). Unit 0 (embeddings) is FSDP2's root:
// gathered at the start of the forward and resharded only when the backward is done, which keeps tied embeddings
// valid for the head. The last unit is not resharded after forward either: its backward comes first.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "models/decoder_model.h"
#include "plugin/fsdp/collectives.h"
#include "plugin/fsdp/fsdp_export.h"
#include "plugin/fsdp/fsdp_unit.h"
#include "plugin/fsdp/process_groups.h"

namespace enginery {
namespace fsdp {

struct FsdpOptions {
  ShardingLayout layout = ShardingLayout::kPerParameter;
  UnitPrecision precision;
  c10::ScalarType buffer_dtype = c10::kFloat;
  bool reshard_after_forward = true;
};

class ENGINERY_FSDP_API FsdpModule : public models::UnitHooks {
 public:
  // This rank's master shard of unit `unit` (fp32 [layout.shard_numel()]), given the unit's parameters (shapes
  // only on ranks that do not hold the weights) and their layout. A collective when it scatters.
  using ShardSource =
      std::function<torch::Tensor(size_t unit, const std::vector<torch::Tensor>& params, const ShardLayout& layout)>;
  // Shards `model`: each unit's master shard comes from `source`, by default this rank's slice of the parameters'
  // own values (every rank built the same full model). A source that scatters lets the parameters be
  // storage-less on this rank, so no rank needs the full weights (veomni's build path). Every parameter ends up
  // sharded, with no storage until its unit is gathered.
  FsdpModule(std::shared_ptr<models::DecoderModel> model, DpGroups groups, FsdpOptions options,
             const torch::Device& device, const ShardSource& source = {});
  ~FsdpModule() override;

  void pre_forward(size_t unit) override;
  void post_forward(size_t unit, const std::vector<torch::Tensor>& outputs) override;

  // After a forward without backward (no-grad or forward_only): reshard everything.
  void after_forward_only();
  // Before backward: from here on each unit is finished as soon as its own backward ends (the gradient of its
  // input is complete): with `sync` its full grads are reduced into the shard grads and freed, and it is resharded,
  // so at most a few units hold full parameters and gradients at any time (FSDP2's post-backward).
  void before_backward(bool sync);
  // After backward: finishes the units backward did not (the first, which may hold tied weights, and any unit
  // that got no gradient): with `sync`, reduce their full grads into the shard grads; then reshard every unit.
  // Without `sync` (an earlier micro-batch) the full grads stay and keep accumulating, as FSDP's no_sync.
  void after_backward(bool sync);

  void zero_grad();  // shard grads (deferred, see FsdpUnit::zero_shard_grad) and any leftover full grads
  void settle_grads();  // carries out pending zeros: before anything reads the shard grads it holds
  // engine.param_offload: every unit keeps its master and shard gradient on the host (FsdpUnit::keep_master_on_host);
  // each unshard then starts the upload of the unit that comes next (the next in forward, the previous in backward).
  void keep_masters_on_host(const std::shared_ptr<CopyStream>& copies);
  void drop_prefetched();  // uploads nobody consumed; the masters may change before the next pass
  std::vector<FsdpUnit>& units() { return units_; }
  const DpGroups& groups() const { return groups_; }
  const FsdpOptions& options() const { return options_; }

 private:
  std::shared_ptr<models::DecoderModel> model_;
  DpGroups groups_;
  FsdpOptions options_;
  std::vector<FsdpUnit> units_;

  void finish_backward(size_t unit);
  bool in_backward_ = false;
  bool sync_in_backward_ = false;
  std::vector<bool> finished_;  // per unit, this backward
};

}  // namespace fsdp
}  // namespace enginery
