#pragma once
// FSDPEngine: trains a models::DecoderModel sharded across the data-parallel ranks (ZeRO-3; docs/ARCHITECTURE.md,
// "One step" and "Precision").
//
// initialize() runs four steps a subclass can reshape (the VeOmni engine takes its own build path):
//   build_model()          virtual: the ModelBuilder given at construction, else models::build_model
//   shard_model()          virtual: build_fsdp_module(), which sets the precision and the scaler
//                          (BaseEngine::set_precision) and shards; an override builds the FsdpModule its own way
//                          (VeOmni scatters the shards from rank 0), and initialize() refuses one that built none
//   build_optimizer()      virtual: AdamW over the fp32 master shards
//   build_lr_scheduler()   virtual
// BaseEngine's constructor already set autocast bf16 and no scaler, which stand for an override of shard_model()
// that never calls set_precision.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "host_api/config_support.h"
#include "host_api/exports.h"
#include "models/decoder_model.h"
#include "models/layers.h"
#include "plugin/fsdp/adamw.h"
#include "plugin/fsdp/backend_options.h"
#include "plugin/fsdp/failure_agreement.h"
#include "plugin/fsdp/fsdp_export.h"
#include "plugin/fsdp/fsdp_module.h"
#include "plugin/fsdp/lr_scheduler.h"
#include "plugin/fsdp/optimizer_step.h"
#include "plugin/fsdp/residency.h"
#include "plugin/fsdp/sharded_grad_scaler.h"
#include "plugin/fsdp/ulysses.h"

namespace enginery {
namespace fsdp {

using ModelBuilder = std::function<std::shared_ptr<models::DecoderModel>(const EngineArgs& args)>;

class ENGINERY_FSDP_API FSDPEngine : public BaseEngine {
 public:
  // `model_builder` empty: the models library builds args.model (what the plugin's registered factory does).
  // The shard layout follows the backend name (layout_for_backend).
  explicit FSDPEngine(EngineArgs args, ModelBuilder model_builder = {});
  ~FSDPEngine() override;

  // What the fsdp and fsdp2 backends honour on `device` (the registry refuses anything else).
  static ConfigSupport config_support(const std::string& device);

  void initialize() override;

  void optimizer_zero_grad() override;
  torch::Tensor optimizer_step() override;
  double lr_scheduler_step() override;

  // Both gather one unit at a time (fsdp_exports.cpp); get_per_tensor_param yields the fp32 masters.
  void get_per_tensor_param(
      const std::function<void(const std::string& name, const torch::Tensor& full)>& visit) override;
  // The stream refers to this engine's units: use it up before the engine changes (a step, to(), destruction).
  std::unique_ptr<WeightStream> export_weights(c10::ScalarType dtype) override;
  // This rank's pieces of the fp32 masters, one unit per group, cast to `dtype` (fsdp_exports.cpp): the shard
  // group's ranks hold the pieces, HSDP replicas other than the first do not contribute. Not collective; the pieces
  // are on the master's device (the host while offloaded).
  ShardPlacement shard_placement() const override;
  std::unique_ptr<ShardStream> export_shards(c10::ScalarType dtype) override;

  // This rank's master and gradient pieces as views into the units' shards (fsdp_train_state.cpp): the shard
  // export's ranges; gradients promoted to fp32 first. AdamW's hyperparameters and the next step's lr.
  std::vector<LocalParameter> local_parameters() override;
  OptimizerHyperparameters optimizer_hyperparameters() const override;
  void set_optimizer_hyperparameters(const OptimizerHyperparameters& values) override;
  // Checkpoints (plugin/fsdp/CHECKPOINT.md): collective; atomic (a temporary sibling, fsynced, renamed into place);
  // readable at any world size, fsdp_size and strategy. args().checkpoint.save_contents / load_contents select
  // model, optimizer, extra (and hf_model on save: a Hugging Face directory "huggingface" inside).
  void save_checkpoint(const std::string& path, int64_t global_step, int64_t max_ckpt_to_keep) override;
  void load_checkpoint(const std::string& path) override;
  // Writes the full weights as a Hugging Face directory (config.json + safetensors, sharded above max_shard_bytes)
  // that transformers and models::build_model load. Collective; atomic like a checkpoint.
  static constexpr int64_t kHfShardBytes = 5LL << 30;  // transformers' save_pretrained default, "5GB"
  void export_hf(const std::string& dir, int64_t max_shard_bytes = kHfShardBytes);

  // BaseEngine::to (fsdp_engine_offload.cpp): moves the fp32 master shards (`model`), AdamW's exp_avg, exp_avg_sq
  // and device step counters (`optimizer`) and the shard gradients (`grad`) to the CPU (pinned memory when they
  // leave a GPU) or back to device(). The copies are asynchronous, followed by one synchronisation; then each
  // tensor object is re-pointed at its copy in place (set_data), so the optimizer's lists and the units, which hold
  // the same tensor objects, follow without being rebuilt; the old storage goes with its last reference and the
  // CUDA cache is emptied. On a CPU engine, to(cpu) still copies into fresh storage (what the CPU tests exercise).
  // The grad scaler's two scalars stay where they are. A step needing a part that is away is refused.
  void move_state(const torch::Device& device, bool model, bool optimizer, bool grad) override;
  // Whether any part is away from device() (always false on a CPU engine).
  bool offloaded() const { return residency_.any_away(); }

  // The world, or with Ulysses sequence parallelism one rank of each sequence group (ulysses.h), as verl's engine.
  int64_t get_data_parallel_rank() const override { return args_.rank / options_.ulysses_size; }
  int64_t get_data_parallel_size() const override { return args_.world_size / options_.ulysses_size; }
  CommGroupPtr get_data_parallel_group() const override {
    return options_.ulysses_size == 1 ? args_.world_group : ulysses_.data ? ulysses_.data->group() : CommGroupPtr();
  }
  int64_t ulysses_sequence_parallel_size() const { return options_.ulysses_size; }
  torch::Device device() const override { return device_; }
  const EngineArgs& args() const override { return args_; }

  // Introspection (tests, subclasses).
  std::shared_ptr<models::DecoderModel> model() const { return model_; }
  FsdpModule* fsdp_module() const { return fsdp_.get(); }
  AdamW* optimizer() const { return optimizer_.get(); }
  LrScheduler* lr_scheduler() const { return lr_scheduler_.get(); }
  // The base's one scaler, as the type this engine installs (null without a scaler).
  ShardedGradScaler* sharded_grad_scaler() const { return static_cast<ShardedGradScaler*>(grad_scaler()); }
  c10::ScalarType param_dtype() const { return precision().param_dtype; }
  c10::ScalarType reduce_dtype() const { return precision().reduce_dtype; }

 protected:
  MicroBatchResult forward_step(const Batch& micro_batch, const LossFn& loss_fn, const LossContext& ctx,
                                bool forward_only) override;

  virtual std::shared_ptr<models::DecoderModel> build_model();
  virtual void shard_model() { build_fsdp_module(); }
  void build_fsdp_module();
  virtual void build_optimizer();
  virtual void build_lr_scheduler();

  // Throws EngineryError where autocast cannot compute in autocast_dtype() on this device (never a silent
  // fallback).
  void check_precision_supported() const;
  void set_training(bool training) override;
  // engine.param_offload / engine.optimizer_offload (fsdp_engine_offload_step.cpp): after build_optimizer, moves
  // the masters and shard gradients (param_offload) and AdamW's moments (optimizer_offload) into pinned host memory
  // for good and makes the optimizer step streamed. A no-op with both keys false.
  void place_offloaded_state();
  // Throws EngineryError naming `what` and engine.forward_only on a forward-only engine (no optimizer is built).
  void require_trainable(const std::string& what) const;
  // Throws EngineryError naming `what` when a part it needs (model, optimizer, grad) is offloaded.
  void require_resident(const std::string& what, bool model, bool optimizer, bool grad) const;
  // The sharded module, for `what`: throws EngineryError naming it before initialize() built the module.
  FsdpModule& sharded_module(const std::string& what) const;
  // The data-parallel world group (shard_model() built it with the module).
  const Collectives& world_collectives() const { return *groups_.world; }

  EngineArgs args_;
  ModelBuilder model_builder_;
  torch::Device device_;
  BackendOptions options_;  // [engine.<backend>], read at construction
  std::shared_ptr<models::DecoderModel> model_;
  DpGroups groups_;
  std::unique_ptr<FsdpModule> fsdp_;  // built by shard_model(); null only before initialize()
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<LrScheduler> lr_scheduler_;
  ShardingLayout layout_;

 private:
  // options_.recompute applied to the built model (fsdp_engine_recompute.cpp).
  void apply_recompute_policy();
  UlyssesGroups ulysses_;  // built by initialize() when options_.ulysses_size > 1
  Residency residency_;  // parts moved to the CPU by move_state while the engine computes on a GPU

  // After place_offloaded_state: the optimizer step's pipeline over the units and AdamW, placed where the offload
  // keys put the state (fsdp_engine_optim.cpp). Null without an optimizer or without FSDP units.
  void wire_optimizer_step();
  std::unique_ptr<OptimizerStep> optimizer_step_;

  // Checkpoint helpers (fsdp_checkpoint.cpp, fsdp_hf_export.cpp).
  void require_sharded(const std::string& what) const;
  // failure_agreement.h's agree_or_throw over the world group.
  void agree(const std::string& error, const std::string& stage, const std::function<void()>& on_failure) const {
    agree_or_throw(world_collectives(), device_, error, stage, on_failure);
  }
  // Gathers the full weights (collective) and, on rank 0, writes them to `dir`; returns rank 0's error
  // (fsdp_hf_export.cpp).
  std::string write_hf_weights(const std::string& dir, int64_t max_shard_bytes);
};

}  // namespace fsdp
}  // namespace enginery
