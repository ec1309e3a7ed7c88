// FSDPEngine::export_hf: the full weights as a Hugging Face directory (config.json + safetensors), gathered one unit
// at a time and written by rank 0 into a temporary sibling that is renamed into place, as a checkpoint is
// (plugin/fsdp/CHECKPOINT.md); a checkpoint's hf_model content is written by the same code.
#include <filesystem>

#include "models/model_factory.h"
#include "plugin/fsdp/failure_agreement.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "support/durable_fs.h"
#include "support/torch_compat.h"

namespace enginery {
namespace fsdp {

namespace fs = std::filesystem;

std::string FSDPEngine::write_hf_weights(const std::string& dir, int64_t max_shard_bytes) {
  const bool lead = world_collectives().rank() == 0;
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  get_per_tensor_param([&](const std::string& name, const torch::Tensor& full) {
    if (lead) weights.emplace_back(name, full.to(torch::kCPU));
  });
  if (!lead) return {};
  try {
    models::save_hf(*model_, dir, weights, max_shard_bytes);
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

void FSDPEngine::export_hf(const std::string& dir, int64_t max_shard_bytes) {
  require_sharded("export_hf");
  const bool lead = world_collectives().rank() == 0;
  const fs::path final_path(dir), tmp = durable::temp_dir_for(final_path);
  agree(lead ? error_of([&] { durable::fresh_dir(tmp); }) : "", "export_hf " + dir, {});
  std::string error = write_hf_weights(tmp.string(), max_shard_bytes);
  if (lead && error.empty()) {
    error = error_of([&] {
      durable::sync_path(tmp);
      for (const auto& entry : fs::directory_iterator(tmp)) durable::sync_path(entry.path());
      durable::publish_dir(tmp, final_path);
    });
  }
  agree(error, "export_hf " + dir, [&] {
    std::error_code ec;
    if (lead) compat::remove_all(tmp, ec);
  });
}

}  // namespace fsdp
}  // namespace enginery
