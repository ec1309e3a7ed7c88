// Shard export (host_api/exports.h; docs/ARCHITECTURE.md, "The contract"): each parameter's piece of this
// rank's fp32 master shard, by Hugging Face name, cast to the receiver's dtype, nothing gathered. Both layouts give
// a rank one contiguous flat range of each parameter (shard_layout.h): the flat parameter cuts the concatenation,
// the per-parameter layout cuts whole rows.
#include <utility>

#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/fsdp/hf_param_names.h"

namespace enginery {
namespace fsdp {
namespace {

class UnitShardStream final : public ShardStream {
 public:
  UnitShardStream(FsdpModule& fsdp, models::DecoderModel& model, c10::ScalarType dtype)
      : fsdp_(fsdp), hf_names_(model), dtype_(dtype) {}

  std::vector<LocalShard> next() override {
    torch::NoGradGuard no_grad;
    if (next_unit_ == fsdp_.units().size()) return {};
    const FsdpUnit& unit = fsdp_.units()[next_unit_++];
    const ShardLayout& layout = unit.layout();
    const torch::Tensor& shard = unit.shard();  // fp32 [S], wherever the master lives (device, or host with offload)
    std::vector<LocalShard> group(layout.num_params());
    for (size_t i = 0; i < group.size(); ++i) {
      group[i].name = hf_names_.of(unit, i);
      group[i].full_shape = layout.shape(i);
      group[i].local = torch::empty({0}, shard.options().dtype(dtype_));
    }
    std::vector<bool> seen(group.size(), false);
    for (const ShardRange& r : layout.owned_ranges(fsdp_.groups().shard->rank())) {
      if (seen[r.param]) {  // both layouts give one range per parameter; a layout that did not would lose elements
        throw EngineryError("parameter '" + group[r.param].name + "' has two ranges on one rank", "shard export",
                            "one contiguous range per parameter and rank");
      }
      seen[r.param] = true;
      group[r.param].flat_offset = r.begin;
      group[r.param].local =
          shard.narrow(0, r.shard_offset, r.end - r.begin).to(dtype_, /*non_blocking=*/false, /*copy=*/true);
    }
    return group;
  }

 private:
  FsdpModule& fsdp_;
  HfParamNames hf_names_;
  c10::ScalarType dtype_;
  size_t next_unit_ = 0;
};

}  // namespace

ShardPlacement FSDPEngine::shard_placement() const {
  const DpGroups& groups = sharded_module("shard_placement").groups();
  return {groups.shard_ranks(), groups.replicate->rank() == 0};
}

// No residency check, unlike the weight export: nothing is gathered, so pieces are read from the master wherever it
// is (host memory after to("cpu") or with engine.param_offload), which is where a delta sync between steps finds it.
std::unique_ptr<ShardStream> FSDPEngine::export_shards(c10::ScalarType dtype) {
  return std::make_unique<UnitShardStream>(sharded_module("shard export"), *model_, dtype);
}

}  // namespace fsdp
}  // namespace enginery
