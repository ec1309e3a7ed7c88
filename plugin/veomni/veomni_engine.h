#pragma once
// VeOmniEngine: the VeOmni-style engine, built into the fsdp plugin's library. It derives from fsdp::FSDPEngine
// and keeps its step code (forward_step, forward_backward_batch, the optimizer step, checkpoints), but builds
// itself its own way:
//   build_model()    rank 0 builds (or loads) the full model; every other rank builds only the module structure:
//                    parameters with their shapes and no storage, never allocating, loading or receiving full
//                    weights;
//   shard_model()    scatters each unit's fp32 master shards from rank 0 (FSDP2 per-parameter layout), with the
//                    settings of veomni_settings.h; it never calls the base's build_fsdp_module;
// then the base's AdamW over the master shards.
// Until initialize() the base constructor's defaults stand: autocast bf16, no grad scaler. VeOmni has no scaler
// at all (it never computes in fp16).
#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/fsdp/fsdp_export.h"
#include "plugin/veomni/veomni_settings.h"

namespace enginery {
namespace veomni {

class ENGINERY_FSDP_API VeOmniEngine : public fsdp::FSDPEngine {
 public:
  // Validates every setting (EngineryError naming the field) before anything is built.
  explicit VeOmniEngine(EngineArgs args);

  // What the veomni backend honours on `device` (the registry refuses anything else).
  static ConfigSupport config_support(const std::string& device);

  torch::Tensor optimizer_step() override;

  const VeOmniSettings& settings() const { return settings_; }
  // Whether this rank built (or loaded) the model's full weights: rank 0 only.
  bool built_full_weights() const { return built_full_weights_; }

 protected:
  std::shared_ptr<models::DecoderModel> build_model() override;
  void shard_model() override;

 private:
  std::string where(const std::string& field) const;
  void validate_precision() const;
  torch::Tensor scatter_shard(const std::vector<torch::Tensor>& params, const fsdp::ShardLayout& layout);
  void round_masters_to_bf16();

  VeOmniSettings settings_;
  bool built_full_weights_ = false;
};

}  // namespace veomni
}  // namespace enginery
