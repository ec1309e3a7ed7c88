#include "plugin/fsdp/fsdp_engine.h"

#include "host_api/error.h"
#include "host_api/precision.h"
#include "models/model_factory.h"

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
    : BaseEngine(), args_(std::move(args)), model_builder_(std::move(model_builder)), device_(resolve_device(args_)) {}

FSDPEngine::~FSDPEngine() = default;

void FSDPEngine::initialize() {
  // Every rank builds the same initial weights before sharding.
  torch::manual_seed(static_cast<uint64_t>(args_.engine.seed));
  model_ = build_model();
  if (!model_) throw EngineryError("build_model() returned no model", where(args_, "model.path"));
  build_fsdp_module();
  check_precision_supported();
  build_optimizer();
  build_lr_scheduler();
  set_training(training_);
}

std::shared_ptr<models::DecoderModel> FSDPEngine::build_model() {
  if (model_builder_) return model_builder_(args_);
  models::BuildOptions options;
  options.device = device_;
  options.seed = args_.engine.seed;
  return models::build_model(args_.model, args_.model_type, options);
}

void FSDPEngine::build_fsdp_module() {
  const MixedPrecisionConfig mp = args_.engine.mixed_precision.value_or(MixedPrecisionConfig{});
  param_dtype_ = PrecisionType::to_dtype(mp.param_dtype);
  reduce_dtype_ = PrecisionType::to_dtype(mp.reduce_dtype);
  buffer_dtype_ = PrecisionType::to_dtype(mp.buffer_dtype);
  autocast_dtype_ = param_dtype_;

  const std::string& enabled = args_.engine.grad_scaler.enabled;
  bool want_scaler = false;
  if (enabled == "auto") {
    want_scaler = param_dtype_ == c10::kHalf;
  } else if (enabled == "always") {
    want_scaler = true;
  } else if (enabled != "never") {
    throw EngineryError("unknown grad_scaler.enabled '" + enabled + "'", where(args_, "engine.grad_scaler.enabled"),
                        "auto, always, never");
  }
  if (want_scaler) {
    auto scaler = std::make_unique<ShardedGradScaler>(args_.engine.grad_scaler, device_);
    sharded_scaler_ = scaler.get();
    scaler_ = std::move(scaler);
  } else {
    sharded_scaler_ = nullptr;
    scaler_.reset();
  }

  FsdpOptions options;
  options.strategy = args_.engine.strategy;
  if (options.strategy != "fsdp" && options.strategy != "fsdp2") {
    throw EngineryError("unknown sharding strategy '" + options.strategy + "'", where(args_, "engine.strategy"),
                        "fsdp, fsdp2");
  }
  options.precision.param_dtype = param_dtype_;
  options.precision.reduce_dtype = reduce_dtype_;
  options.buffer_dtype = buffer_dtype_;
  options.reshard_after_forward = args_.engine.reshard_after_forward;
  groups_ = DpGroups::create(args_, args_.engine.fsdp_size);
  model_->to(device_);
  fsdp_ = std::make_unique<FsdpModule>(model_, groups_, options, device_);
}

void FSDPEngine::check_precision_supported() const {
  if (compat::autocast_supported(device_.type(), autocast_dtype_)) return;
  throw EngineryError("this LibTorch build (" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                          std::to_string(TORCH_VERSION_MINOR) + ") cannot compute in " +
                          PrecisionType::to_str(autocast_dtype_) + " on " + args_.device +
                          " (autocast has no such dtype there); enginery never falls back silently",
                      where(args_, "engine.mixed_precision.param_dtype"),
                      args_.device == "cpu" ? "bf16, fp32 on this build's CPU" : "bf16, fp16, fp32");
}

const Collectives& FSDPEngine::world_collectives() {
  if (!groups_.world) groups_.world = std::make_shared<Collectives>(args_.world_group, args_.rank, args_.world_size);
  return *groups_.world;
}

void FSDPEngine::build_optimizer() {
  if (!fsdp_) {
    throw EngineryError("the default optimizer runs on the FSDP master shards; a subclass that skips "
                        "build_fsdp_module must override build_optimizer",
                        where(args_, "optim"));
  }
  if (args_.optim.optimizer != "AdamW") {
    throw EngineryError("unknown optimizer '" + args_.optim.optimizer + "'", where(args_, "optim.optimizer"), "AdamW");
  }
  std::vector<torch::Tensor> params, grads;
  for (auto& u : fsdp_->units()) {
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

void FSDPEngine::get_per_tensor_param(
    const std::function<void(const std::string& name, const torch::Tensor& full)>& visit) {
  torch::NoGradGuard no_grad;
  if (!fsdp_) {
    for (const auto& item : model_->named_parameters()) visit(item.key(), item.value().detach());
    return;
  }
  // The units' names are prefixes chosen by the model; report the model's own (Hugging Face) names.
  std::map<const void*, std::string> hf_names;
  for (const auto& item : model_->named_parameters()) hf_names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  for (auto& u : fsdp_->units()) {
    auto full = u.gather_full_master();
    for (size_t i = 0; i < full.size(); ++i) {
      auto it = hf_names.find(u.params()[i].unsafeGetTensorImpl());
      visit(it != hf_names.end() ? it->second : u.param_names()[i], full[i]);
    }
  }
}

void FSDPEngine::to(const std::string& device, bool model, bool optimizer, bool grad) {
  (void)model, (void)optimizer, (void)grad;
  if (device == args_.device) return;
  throw EngineryError("moving the sharded state to '" + device + "' (offload) is not implemented yet",
                      where(args_, "to()"), args_.device);
}

}  // namespace fsdp
}  // namespace enginery
