// The weights out (host_api/exports.h; docs/ARCHITECTURE.md, "The contract"), one FSDP unit per group, by Hugging
// Face name, in the receiver's dtype:
// - weight export: the unit's full weights, gathered, so the extra memory is one unit and a bf16 export all-gathers
//   half the bytes of the fp32 masters;
// - shard export: each parameter's piece of this rank's fp32 master shard, nothing gathered. Both layouts give a rank
//   one contiguous flat range of each parameter (shard_layout.h): the flat parameter cuts the concatenation, the
//   per-parameter layout cuts whole rows.
#include <utility>

#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/fsdp/hf_param_names.h"

namespace enginery {
namespace fsdp {
namespace {

std::vector<NamedTensor> gathered(FsdpUnit& unit, const HfParamNames& names, const FsdpModule&,
                                  c10::ScalarType dtype) {
  auto full = unit.gather_full(dtype);
  std::vector<NamedTensor> group;
  group.reserve(full.size());
  for (size_t i = 0; i < full.size(); ++i) group.push_back({names.of(unit, i), std::move(full[i])});
  return group;
}

std::vector<LocalShard> owned_pieces(FsdpUnit& unit, const HfParamNames& names, const FsdpModule& fsdp,
                                     c10::ScalarType dtype) {
  const ShardLayout& layout = unit.layout();
  const torch::Tensor& shard = unit.shard();  // fp32 [S], wherever the master lives (device, or host with offload)
  std::vector<LocalShard> group(layout.num_params());
  for (size_t i = 0; i < group.size(); ++i) {
    group[i].name = names.of(unit, i);
    group[i].full_shape = layout.shape(i);
    group[i].local = torch::empty({0}, shard.options().dtype(dtype));
  }
  std::vector<bool> seen(group.size(), false);
  for (const ShardRange& r : layout.owned_ranges(fsdp.groups().shard->rank())) {
    if (seen[r.param]) {  // both layouts give one range per parameter; a layout that did not would lose elements
      throw EngineryError("parameter '" + group[r.param].name + "' has two ranges on one rank", "shard export",
                          "one contiguous range per parameter and rank");
    }
    seen[r.param] = true;
    group[r.param].flat_offset = r.begin;
    group[r.param].local =
        shard.narrow(0, r.shard_offset, r.end - r.begin).to(dtype, /*non_blocking=*/false, /*copy=*/true);
  }
  return group;
}

// The units in the model's order, one per next(), each turned into a group by `per_unit`.
template <class Stream, class Item>
class PerUnitStream final : public Stream {
 public:
  using PerUnit = std::vector<Item> (*)(FsdpUnit&, const HfParamNames&, const FsdpModule&, c10::ScalarType);
  PerUnitStream(FsdpModule& fsdp, models::DecoderModel& model, c10::ScalarType dtype, PerUnit per_unit)
      : fsdp_(fsdp), hf_names_(model), dtype_(dtype), per_unit_(per_unit) {}

  std::vector<Item> next() override {
    torch::NoGradGuard no_grad;
    if (next_unit_ == fsdp_.units().size()) return {};
    return per_unit_(fsdp_.units()[next_unit_++], hf_names_, fsdp_, dtype_);
  }

 private:
  FsdpModule& fsdp_;
  HfParamNames hf_names_;
  c10::ScalarType dtype_;
  PerUnit per_unit_;
  size_t next_unit_ = 0;
};

}  // namespace

std::unique_ptr<WeightStream> FSDPEngine::export_weights(c10::ScalarType dtype) {
  require_resident("weight export", /*model=*/true, /*optimizer=*/false, /*grad=*/false);
  return std::make_unique<PerUnitStream<WeightStream, NamedTensor>>(sharded_module("weight export"), *model_, dtype,
                                                                     gathered);
}

void FSDPEngine::get_per_tensor_param(
    const std::function<void(const std::string& name, const torch::Tensor& full)>& visit) {
  require_resident("get_per_tensor_param", /*model=*/true, /*optimizer=*/false, /*grad=*/false);
  auto stream = export_weights(c10::kFloat);
  while (true) {  // each group dies before the next is gathered: one unit alive at a time
    const auto group = stream->next();
    if (group.empty()) break;
    for (const auto& t : group) visit(t.name, t.tensor);
  }
}

ShardPlacement FSDPEngine::shard_placement() const {
  const DpGroups& groups = sharded_module("shard_placement").groups();
  return {groups.shard_ranks(), groups.replicate->rank() == 0};
}

// No residency check, unlike the weight export: nothing is gathered, so pieces are read from the master wherever it
// is (host memory after to("cpu") or with engine.param_offload), which is where a delta sync between steps finds it.
std::unique_ptr<ShardStream> FSDPEngine::export_shards(c10::ScalarType dtype) {
  return std::make_unique<PerUnitStream<ShardStream, LocalShard>>(sharded_module("shard export"), *model_, dtype,
                                                                   owned_pieces);
}

}  // namespace fsdp
}  // namespace enginery
