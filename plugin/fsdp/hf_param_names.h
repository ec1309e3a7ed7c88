#pragma once
// Hugging Face names of the parameters an FSDP unit holds, for the weight and shard exports and the checkpoint's
// table: a unit names its parameters with prefixes the model chose, the model's own names are Hugging Face's. A
// tensor the model holds under two names (tied embeddings) takes the first.
#include <map>
#include <string>

#include "models/decoder_model.h"
#include "plugin/fsdp/fsdp_unit.h"

namespace enginery {
namespace fsdp {

class HfParamNames {
 public:
  explicit HfParamNames(models::DecoderModel& model);
  // The name of the unit's i-th parameter: the model's, else the unit's own.
  const std::string& of(const FsdpUnit& unit, size_t i) const;

 private:
  std::map<const void*, std::string> by_tensor_;
};

}  // namespace fsdp
}  // namespace enginery
