#include "plugin/fsdp/fsdp_engine.h"

#include "host_api/error.h"
#include "engine_driver/mode_offload.h"
#include "engine_driver/precision.h"
#include "models/model_factory.h"
#include "plugin/fsdp/checkpoint_format.h"
#include "support/torch_compat.h"

namespace enginery {
namespace fsdp {
namespace {

torch::Device resolve_device(const EngineArgs& args) {
  if (args.device == "cpu") return torch::Device(torch::kCPU);
  if (args.device == "cuda") return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(args.local_rank));
  throw EngineryError("unknown device '" + args.device + "'", "EngineArgs.device", "cpu, cuda");
}

std::string where(const EngineArgs& args, const std::string& field) {
  return "fsdp engine (" + args.engine.strategy + "), rank " + std::to_string(args.rank) + ", " + field;
}

}  // namespace

FSDPEngine::FSDPEngine(EngineArgs args, ModelBuilder model_builder)
    : BaseEngine(),
      args_(std::move(args)),
      model_builder_(std::move(model_builder)),
      device_(resolve_device(args_)),
      options_(BackendOptions::read(args_, device_)),
      layout_(layout_for_backend(args_.engine.strategy)) {}

ConfigSupport FSDPEngine::config_support(const std::string& device) {
  ConfigSupport s;
  // What autocast can compute in on this build and device (fp16 on CPU needs LibTorch 2.2+); never a fallback.
  const auto type = device == "cuda" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  s.param_dtypes = {c10::kFloat};
  for (auto dtype : {c10::kBFloat16, c10::kHalf}) {
    if (compat::autocast_supported(type, dtype)) s.param_dtypes.push_back(dtype);
  }
  // Gloo (CPU) reduces fp32 and fp16; bf16 reductions need NCCL.
  s.reduce_dtypes = {c10::kFloat, c10::kHalf};
  if (device == "cuda") s.reduce_dtypes.push_back(c10::kBFloat16);
  s.buffer_dtypes = {c10::kFloat, c10::kBFloat16, c10::kHalf};
  s.scaler_modes = {ScalerMode::kAuto, ScalerMode::kAlways, ScalerMode::kNever};
  s.hsdp = true;
  s.keep_params_after_forward = true;
  s.dynamic_bsz = true;  // the host's loop forms the micro-batches; forward_step takes any number of rows
  s.remove_padding = true;  // the model packs each micro-batch's valid tokens (models/packed_sequences.h)
  // Offload keeps state in host memory between uses (fsdp_engine_offload_step.cpp). Accepted on a CPU engine too,
  // where that is where the state lives already: the same staging code runs there with plain copies.
  s.param_offload = true;
  s.optimizer_offload = true;
  s.backend_options = BackendOptions::names();
  // engine.forward_only (verl's reference policy): no optimizer or LR schedule is built (fsdp_engine.cpp).
  s.forward_only = true;
  s.checkpoint_contents = ckpt::all_contents();
  s.checkpoint_content_subsets = true;
  return s;
}

FSDPEngine::~FSDPEngine() = default;

void FSDPEngine::initialize() {
  // Every rank builds the same initial weights before sharding.
  torch::manual_seed(static_cast<uint64_t>(args_.engine.seed));
  model_ = build_model();
  if (!model_) throw EngineryError("build_model() returned no model", where(args_, "model.path"));
  if (options_.fp8 != models::Fp8Recipe::kOff) model_->set_fp8_recipe(options_.fp8);
  apply_recompute_policy();
  model_->check_sequence_parallel(options_.ulysses_size, args_.world_size,
                                  option_key(args_.engine, kUlyssesSize));
  if (options_.ulysses_size > 1) ulysses_ = UlyssesGroups::create(args_, options_.ulysses_size);
  shard_model();
  if (!fsdp_) {
    throw EngineryError("shard_model() built no FSDP module: every FSDPEngine trains sharded units",
                        where(args_, "engine.strategy"),
                        "an override of shard_model() that calls build_fsdp_module() or builds fsdp_ itself");
  }
  check_precision_supported();
  // A forward-only engine (verl's reference policy) holds no optimizer state and no schedule, as verl's builds none.
  if (!args_.engine.forward_only) build_optimizer();
  place_offloaded_state();
  wire_optimizer_step();
  if (!args_.engine.forward_only) build_lr_scheduler();
  // No gradient held until the first backward, as FSDP2 starts (every param.grad None): engine.module reads None,
  // and the shard gradients' memory is spent only once a backward writes them.
  fsdp_->zero_grad();
  set_training(is_training());
  // Outside the mode contexts the state lives on the host; the first train_mode()/eval_mode() brings it back.
  if (options_.offload_outside_modes) move_state(torch::kCPU, /*model=*/true, /*optimizer=*/true, /*grad=*/true);
}

std::shared_ptr<models::DecoderModel> FSDPEngine::build_model() {
  if (model_builder_) return model_builder_(args_);
  models::BuildOptions options;
  options.device = device_;
  options.seed = args_.engine.seed;
  return models::build_model(args_.model, args_.model_type, options);
}

void FSDPEngine::build_fsdp_module() {
  const MixedPrecisionConfig& mp = args_.engine.mixed_precision;
  const ScalerMode mode = args_.engine.grad_scaler.enabled;
  const bool want_scaler = mode == ScalerMode::kAlways || (mode == ScalerMode::kAuto && mp.param_dtype == c10::kHalf);
  std::unique_ptr<GradScaler> scaler;
  if (want_scaler) scaler = std::make_unique<ShardedGradScaler>(args_.engine.grad_scaler, device_);
  set_precision(Precision{mp.param_dtype, mp.reduce_dtype, mp.buffer_dtype}, std::move(scaler), mode);

  FsdpOptions options;
  options.layout = layout_;
  options.precision.param_dtype = mp.param_dtype;
  options.precision.reduce_dtype = mp.reduce_dtype;
  options.buffer_dtype = mp.buffer_dtype;
  options.reshard_after_forward = args_.engine.reshard_after_forward;
  groups_ = DpGroups::create(args_, args_.engine.fsdp_size);
  model_->to(device_);
  fsdp_ = std::make_unique<FsdpModule>(model_, groups_, options, device_);
}

void FSDPEngine::check_precision_supported() const {
  if (compat::autocast_supported(device_.type(), autocast_dtype())) return;
  throw EngineryError("this LibTorch build (" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                          std::to_string(TORCH_VERSION_MINOR) + ") cannot compute in " +
                          PrecisionType::to_str(autocast_dtype()) + " on " + args_.device +
                          " (autocast has no such dtype there); enginery never falls back silently",
                      where(args_, "engine.mixed_precision.param_dtype"),
                      args_.device == "cpu" ? "bf16, fp32 on this build's CPU" : "bf16, fp16, fp32");
}

FsdpModule& FSDPEngine::sharded_module(const std::string& what) const {
  if (!fsdp_) throw EngineryError(what + " before initialize()", where(args_, "initialize"));
  return *fsdp_;
}

void FSDPEngine::build_optimizer() {
  if (args_.optim.optimizer != "AdamW") {
    throw EngineryError("unknown optimizer '" + args_.optim.optimizer + "'", where(args_, "optim.optimizer"), "AdamW");
  }
  std::vector<torch::Tensor> params, grads;
  for (auto& u : sharded_module("build_optimizer").units()) {
    params.push_back(u.shard());
    grads.push_back(u.shard_grad());
  }
  optimizer_ = std::make_unique<AdamW>(std::move(params), std::move(grads), args_.optim);
}

void FSDPEngine::build_lr_scheduler() { lr_scheduler_ = std::make_unique<LrScheduler>(args_.optim); }

void FSDPEngine::set_training(bool training) {
  BaseEngine::set_training(training);
  if (model_) model_->train(training);
}

}  // namespace fsdp
}  // namespace enginery
