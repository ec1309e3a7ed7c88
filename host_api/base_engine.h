#pragma once
// The engine contract (docs/ARCHITECTURE.md, "The contract"), mirroring verl's BaseEngine. Plugins derive from
// it; the host only sees this.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "host_api/batch.h"
#include "host_api/comm_group.h"
#include "host_api/config.h"
#include "host_api/grad_scaler.h"
#include "host_api/loss.h"
#include "host_api/weight_export.h"

namespace enginery {

// Everything a factory needs to build an engine. The host owns the world group and hands it over; engines may
// make subgroups from `store`.
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

// Results of forward_backward_batch / train_batch / infer_batch.
struct BatchOutput {
  torch::Tensor loss;                               // sum of the micro-batch losses (the global token mean)
  std::map<std::string, torch::Tensor> outputs;     // "log_probs", "entropy", "values": micro-batches in order
  std::map<std::string, torch::Tensor> metrics;     // loss-function metrics, averaged over micro-batches
  torch::Tensor grad_norm;                          // train_batch only; may be non-finite (the step was skipped)
  double lr = 0.0;                                  // train_batch only: what lr_scheduler_step returned (as verl)
};

// What one forward_step returns for one micro-batch.
struct MicroBatchResult {
  torch::Tensor loss;                            // undefined when no loss function was given
  ModelOutput output;
  std::map<std::string, torch::Tensor> metrics;  // the loss function's
};

// The precision an engine computes in (docs/ARCHITECTURE.md, "Precision"). Autocast runs in param_dtype; fp32
// means no autocast at all.
struct Precision {
  c10::ScalarType param_dtype = c10::kBFloat16;
  c10::ScalarType reduce_dtype = c10::kFloat;
  c10::ScalarType buffer_dtype = c10::kFloat;
};

// What an engine implements to honour BaseEngine::to (docs/ARCHITECTURE.md, "The contract"). A separate interface,
// not a new virtual of BaseEngine, so BaseEngine's vtable and layout stay those of 2.0: a 2.0 plugin's engine
// lacks this base, and BaseEngine::to refuses it by name instead of calling through a slot it never had.
class OffloadableEngine {
 public:
  virtual ~OffloadableEngine();  // key function: defined out of line in libenginery_host_api (one type identity)
  // Moves the parts named to `device` (the engine's own device or the CPU) and returns once they are there.
  virtual void move_state(const torch::Device& device, bool model, bool optimizer, bool grad) = 0;
};

class BaseEngine {
 public:
  // Sets the precision defaults first of all (autocast bf16, no scaler), so a subclass that never builds through
  // a module path of its own is still valid.
  BaseEngine();
  virtual ~BaseEngine();  // key function: defined out of line in libenginery_host_api
  BaseEngine(const BaseEngine&) = delete;
  BaseEngine& operator=(const BaseEngine&) = delete;

  virtual void initialize() = 0;

  bool is_training() const { return training_; }

  virtual void optimizer_zero_grad() = 0;
  // Returns the global grad norm before clipping (a 0-dim tensor on the engine's device). Non-finite: the step
  // was skipped on every rank.
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

  // verl's offload: moves the sharded master parameters (`model`), the optimizer state (`optimizer`) and the shard
  // gradients (`grad`) to `device` (the CPU, or back to the engine's own device()), frees what they held there,
  // and returns once the copies are done (one synchronisation). A step while a part it needs is away is refused.
  // Engines that do not derive from OffloadableEngine refuse it with EngineryError naming the engine. Not
  // collective. verl drives it from its train/eval contexts when param/optimizer offload is on; here the caller
  // calls it on every rank alike (docs/ARCHITECTURE.md, "The contract").
  void to(const torch::Device& device, bool model = true, bool optimizer = true, bool grad = true);
  // Where the engine computes (its tensors, and the device of the group's collectives).
  virtual torch::Device device() const = 0;
  // What the engine was built from.
  virtual const EngineArgs& args() const = 0;

  // Precision (docs/ARCHITECTURE.md, "Precision").
  const Precision& precision() const { return precision_; }
  c10::ScalarType autocast_dtype() const { return precision_.param_dtype; }
  GradScaler* grad_scaler() const { return scaler_.get(); }

 protected:
  // One micro-batch, called by the host's loop (engine_driver/step_loop.h): forward under autocast_dtype(), the
  // loss (when loss_fn is set), and unless forward_only the backward of the scaled loss. `ctx` says which micro-batch of how many this is (an FSDP engine reduces
  // gradients after the last only).
  virtual MicroBatchResult forward_step(const Batch& micro_batch, const LossFn& loss_fn, const LossContext& ctx,
                                        bool forward_only) = 0;
  virtual void set_training(bool training) { training_ = training; }

  // The one way to change the precision and the scaler. Refuses fp16 without a scaler unless the user chose
  // `configured` == ScalerMode::kNever (engine.grad_scaler.enabled = "never"); refuses a scaler the
  // configuration forbids.
  void set_precision(const Precision& precision, std::unique_ptr<GradScaler> scaler, ScalerMode configured);

 private:
  friend struct EngineAccess;  // the host's driver (engine_driver/engine_access.h): the loop and the mode guards

  Precision precision_;
  // The mode guards open on this engine (engine_driver/mode_guard.h). 2.3. Sits in the padding between precision_
  // (3 bytes) and scaler_ (8-aligned): BaseEngine's size and every offset a 2.0 plugin's engine was compiled against stay the same (a derived class may reuse a base's tail
  // padding, never its interior padding). base_engine.cpp asserts the size.
  uint16_t open_modes_ = 0;
  std::unique_ptr<GradScaler> scaler_;
  bool training_ = true;
};

}  // namespace enginery
