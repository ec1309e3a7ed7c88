// Weight export (docs/ARCHITECTURE.md, "The contract"): the full weights by Hugging Face name, one FSDP unit
// gathered at a time in the receiver's dtype, so the extra memory is one unit and a bf16 export all-gathers half
// the bytes of the fp32 masters.
#include <utility>

#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/fsdp/hf_param_names.h"

namespace enginery {
namespace fsdp {
namespace {

class UnitWeightStream final : public WeightStream {
 public:
  UnitWeightStream(FsdpModule& fsdp, models::DecoderModel& model, c10::ScalarType dtype)
      : fsdp_(fsdp), hf_names_(model), dtype_(dtype) {}

  std::vector<NamedTensor> next() override {
    torch::NoGradGuard no_grad;
    if (next_unit_ == fsdp_.units().size()) return {};
    FsdpUnit& unit = fsdp_.units()[next_unit_++];
    auto full = unit.gather_full(dtype_);
    std::vector<NamedTensor> group;
    group.reserve(full.size());
    for (size_t i = 0; i < full.size(); ++i) {
      group.push_back({hf_names_.of(unit, i), std::move(full[i])});
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

std::unique_ptr<WeightStream> FSDPEngine::export_weights(c10::ScalarType dtype) {
  require_resident("weight export", /*model=*/true, /*optimizer=*/false, /*grad=*/false);
  return std::make_unique<UnitWeightStream>(sharded_module("weight export"), *model_, dtype);
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

}  // namespace fsdp
}  // namespace enginery
