#pragma once
// The engine contract (docs/ARCHITECTURE.md, "The contract"), mirroring verl's BaseEngine.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "host_api/batch.h"
#include "host_api/comm_group.h"
#include "host_api/config_support.h"
#include "host_api/config.h"
#include "host_api/grad_scaler.h"
#include "host_api/loss.h"
#include "host_api/exports.h"

namespace enginery {

// Everything a factory needs to build an engine. The host owns the world group; engines may make subgroups.
struct EngineArgs {
  std::string model_type = "language_model";  // "language_model" | "value_model"
  std::string device = "cpu";                 // "cpu" | "cuda"
  int64_t local_rank = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  CommGroupPtr world_group;  // may be null only when world_size == 1
  StorePtr store;            // rendezvous store, for subgroups
  ModelConfig model;
  EngineConfig engine;
  OptimizerConfig optim;
  CheckpointConfig checkpoint;
};

// What one forward_step returns for one micro-batch.
struct MicroBatchResult {
  torch::Tensor loss;                            // undefined when no loss function was given
  ModelOutput output;
  std::map<std::string, torch::Tensor> metrics;  // the loss function's
};

// The precision an engine computes in (docs/ARCHITECTURE.md, "Precision"); fp32 param_dtype means no autocast.
struct Precision {
  c10::ScalarType param_dtype = c10::kBFloat16;
  c10::ScalarType reduce_dtype = c10::kFloat;
  c10::ScalarType buffer_dtype = c10::kFloat;
};

class BaseEngine {
 public:
  BaseEngine();  // sets the precision defaults first of all ([Note: precision policy])
  virtual ~BaseEngine();  // key function: defined out of line in libenginery_host_api (one type identity)
  BaseEngine(const BaseEngine&) = delete;
  BaseEngine& operator=(const BaseEngine&) = delete;

  virtual void initialize() = 0;
  bool is_training() const { return training_; }
  virtual void optimizer_zero_grad() = 0;
  // The global grad norm before clipping (0-dim, on device(); summed in fp64: 1e-5 rel). Non-finite: all ranks skipped.
  virtual torch::Tensor optimizer_step() = 0;
  virtual double lr_scheduler_step() = 0;  // returns the lr for the next step

  // Full (unsharded) tensors by Hugging Face name, one at a time; collective: every rank must call it.
  virtual void get_per_tensor_param(
      const std::function<void(const std::string& name, const torch::Tensor& full)>& visit) = 0;

  virtual void save_checkpoint(const std::string& path, int64_t global_step, int64_t max_ckpt_to_keep) = 0;
  virtual void load_checkpoint(const std::string& path) = 0;

  virtual int64_t get_data_parallel_rank() const = 0;
  virtual int64_t get_data_parallel_size() const = 0;
  virtual CommGroupPtr get_data_parallel_group() const = 0;
  virtual bool is_mp_src_rank_with_outputs() const { return true; }

  // verl's offload of the master shards (`model`), optimizer state and shard gradients to `device` (the CPU, or back
  // to device()); returns once they are there (docs/ARCHITECTURE.md, "The contract", offload). Not collective.
  void to(const torch::Device& device, bool model = true, bool optimizer = true, bool grad = true) {
    move_state(device, model, optimizer, grad);
  }
  virtual torch::Device device() const = 0;  // where its tensors and its group's collectives live
  virtual const EngineArgs& args() const = 0;  // what it was built from

  // Optional operations, each declared by a Capabilities flag at registration (host_api/config_support.h). The
  // defaults refuse with EngineryError naming the engine and the flag (docs/ARCHITECTURE.md, "The contract").
  virtual void move_state(const torch::Device& device, bool model, bool optimizer, bool grad);  // offload
  // weight_export: one unit per group. The default yields everything get_per_tensor_param gives as one group.
  virtual std::unique_ptr<WeightStream> export_weights(c10::ScalarType dtype);
  virtual ShardPlacement shard_placement() const;                                // shard_export
  virtual std::unique_ptr<ShardStream> export_shards(c10::ScalarType dtype);     // shard_export
  virtual std::vector<LocalParameter> local_parameters();                        // train_state
  virtual OptimizerHyperparameters optimizer_hyperparameters() const;            // train_state
  virtual void set_optimizer_hyperparameters(const OptimizerHyperparameters& values);  // train_state

  const Precision& precision() const { return precision_; }
  c10::ScalarType autocast_dtype() const { return precision_.param_dtype; }
  GradScaler* grad_scaler() const { return scaler_.get(); }

 protected:
  // One micro-batch, called by the host's loop (engine_driver/step_loop.h): forward under autocast_dtype(), the
  // loss (when loss_fn is set), and unless forward_only the backward of the scaled loss. `ctx` says which
  // micro-batch of how many this is (an FSDP engine reduces gradients after the last only).
  virtual MicroBatchResult forward_step(const Batch& micro_batch, const LossFn& loss_fn, const LossContext& ctx,
                                        bool forward_only) = 0;
  virtual void set_training(bool training) { training_ = training; }

  // [Note: precision policy] (docs/ARCHITECTURE.md, "Precision") The precision is private to BaseEngine, its
  // constructor sets the defaults (bf16 autocast, fp32 reductions and buffers, no scaler) and this is the one way
  // to change it: fp16 without a scaler is refused unless the user chose `configured` == ScalerMode::kNever
  // (engine.grad_scaler.enabled = "never"), and a scaler the configuration forbids is refused. So every engine
  // computes in what precision() says, and the host can trust that for the loop, conformance and checkpoints.
  void set_precision(const Precision& precision, std::unique_ptr<GradScaler> scaler, ScalerMode configured);

 private:
  [[noreturn]] void refuse(const std::string& operation, const std::string& capability) const;
  friend struct EngineAccess;  // the host's driver (engine_driver/engine_access.h): the loop and the mode guards

  Precision precision_;
  int open_modes_ = 0;  // the mode guards open on this engine (engine_driver/mode_guard.h)
  Capabilities declared_;  // what the registration declared (the registry sets it; engine_driver reads it)
  std::unique_ptr<GradScaler> scaler_;
  bool training_ = true;
};

}  // namespace enginery
