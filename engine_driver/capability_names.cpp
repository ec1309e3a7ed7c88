#include "engine_driver/capability_names.h"

#include <algorithm>

#include "engine_driver/mode_offload.h"
#include "engine_driver/precision.h"

namespace enginery {

std::vector<std::string> capability_names(const EngineTraits& traits, const std::string& device) {
  const Capabilities& c = traits.capabilities;
  const ConfigSupport& s = traits.config;
  std::vector<std::string> names;
  for (c10::ScalarType dtype : c.verified_precisions) {
    names.push_back("precision-" + device + "-" + PrecisionType::to_str(dtype));
  }
  const auto& options = s.backend_options;
  const bool modes = std::find(options.begin(), options.end(), kOffloadOutsideModes) != options.end();
  for (const auto& [on, name] : {std::pair{c.multi_rank, "multi-rank"},
                                 std::pair{c.checkpoint_same_world, "checkpoint-same-world"},
                                 std::pair{c.grad_scaler, "grad-scaler"},
                                 std::pair{c.temperature, "temperature"},
                                 std::pair{c.offload, "offload"},
                                 std::pair{modes, "offload-modes"},
                                 std::pair{c.weight_export, "weight-export"},
                                 std::pair{c.shard_export, "shard-export"},
                                 std::pair{c.train_state, "train-state"},
                                 std::pair{s.hsdp, "hsdp"},
                                 std::pair{s.keep_params_after_forward, "reshard-after-forward"}}) {
    if (on) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace enginery
