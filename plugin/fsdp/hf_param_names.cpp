#include "plugin/fsdp/hf_param_names.h"

namespace enginery {
namespace fsdp {

HfParamNames::HfParamNames(models::DecoderModel& model) {
  for (const auto& item : model.named_parameters()) by_tensor_.emplace(item.value().unsafeGetTensorImpl(), item.key());
}

const std::string& HfParamNames::of(const FsdpUnit& unit, size_t i) const {
  auto it = by_tensor_.find(unit.params()[i].unsafeGetTensorImpl());
  return it != by_tensor_.end() ? it->second : unit.param_names()[i];
}

}  // namespace fsdp
}  // namespace enginery
