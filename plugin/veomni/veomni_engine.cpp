#include "plugin/veomni/veomni_engine.h"

#include <algorithm>

#include "host_api/error.h"
#include "engine_driver/mode_offload.h"
#include "engine_driver/precision.h"
#include "models/causal_lm.h"
#include "models/model_args.h"

namespace enginery {
namespace veomni {
namespace {

// A tensor of `shape` whose storage has no bytes: what a parameter of a rank that holds no weights looks like.
torch::Tensor storage_less(at::IntArrayRef shape, const torch::TensorOptions& options) {
  auto t = torch::empty({0}, options);
  t.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
  return t;
}

// The module structure of `margs` with no weights: every parameter has its real shape and no storage.
// LibTorch's C++ modules allocate and randomly fill their parameters as they are constructed (there is no
// meta-device context in C++), so the model is constructed with hidden_size 1: every matrix of these decoders
// (embeddings, q/k/v/o, gate/up/down, lm_head, score) has hidden_size on one side, which leaves vectors only,
// about 1/hidden_size of the weights. A second such build with hidden_size 2 tells which dims are hidden_size;
// each parameter then takes its real shape without storage. The forward reads shapes from the parameters only,
// never args().hidden_size (which reads 1 on such a model).
std::shared_ptr<models::CausalLM> structure_only(models::ModelArgs margs, models::HeadKind head) {
  const int64_t hidden = margs.hidden_size;
  margs.hidden_size = 1;
  auto model = std::make_shared<models::CausalLM>(margs, head);
  margs.hidden_size = 2;
  models::CausalLM probe(margs, head);
  const auto probe_params = probe.named_parameters();
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters()) {
    std::vector<int64_t> shape = item.value().sizes().vec();
    const auto grown = probe_params[item.key()].sizes();
    for (size_t d = 0; d < shape.size(); ++d) {
      if (grown[d] != shape[d]) shape[d] = hidden;
    }
    item.value().set_data(storage_less(shape, item.value().options()));
  }
  return model;
}

}  // namespace

VeOmniEngine::VeOmniEngine(EngineArgs args) : FSDPEngine(std::move(args)), settings_(parse_settings(args_.engine)) {
  validate_precision();
}

std::string VeOmniEngine::where(const std::string& field) const {
  return "veomni engine, rank " + std::to_string(args_.rank) + ", " + field;
}

ConfigSupport VeOmniEngine::config_support(const std::string& device) {
  ConfigSupport s = FSDPEngine::config_support(device);
  // VeOmni computes in bf16 or fp32, has no grad scaler, shards over every rank and reshards as
  // engine.veomni.enable_full_shard says.
  s.param_dtypes.erase(std::remove(s.param_dtypes.begin(), s.param_dtypes.end(), c10::kHalf), s.param_dtypes.end());
  s.scaler_modes = {ScalerMode::kAuto, ScalerMode::kNever};
  s.hsdp = false;
  s.keep_params_after_forward = false;
  s.backend_options = option_names();
  return s;
}

void VeOmniEngine::validate_precision() const {
  // What ConfigSupport cannot say alone: the combination of two keys.
  const c10::ScalarType param = args_.engine.mixed_precision.param_dtype;
  if (!settings_.mixed_precision && param != c10::kBFloat16) {
    throw EngineryError("engine.veomni.mixed_precision = false means bf16 weights and bf16 compute, which "
                            "contradicts param_dtype " + PrecisionType::to_str(param) +
                            "; use engine.veomni.mixed_precision = true for fp32 master weights",
                        where("engine.mixed_precision.param_dtype"), "bf16 (with engine.veomni.mixed_precision = false)");
  }
}

std::shared_ptr<models::DecoderModel> VeOmniEngine::build_model() {
  if (args_.rank == 0) {
    built_full_weights_ = true;
    return FSDPEngine::build_model();
  }
  // Structure only: no weights are read, received or allocated here; the scatter in shard_model() fills the
  // local shards.
  const models::HeadKind head = args_.model_type == "value_model" ? models::HeadKind::kValue
                                                                   : models::HeadKind::kLanguageModel;
  if (args_.model_type != "language_model" && args_.model_type != "value_model") {
    throw EngineryError("unknown model type '" + args_.model_type + "'", where("model_type"),
                        "language_model, value_model");
  }
  const models::ModelArgs margs = models::args_of(args_.model.source());
  auto model = structure_only(margs, head);
  model->set_gradient_checkpointing(args_.model.enable_gradient_checkpointing);
  return model;
}

torch::Tensor VeOmniEngine::scatter_shard(const std::vector<torch::Tensor>& params, const fsdp::ShardLayout& layout) {
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(device_);
  const int64_t s = layout.shard_numel(), world = layout.world();
  const fsdp::Collectives& group = *groups_.shard;
  torch::Tensor shard = torch::empty({s}, fp32);
  if (world == 1) {
    layout.pack(params, shard);
  } else {
    // Only rank 0 holds the weights: it packs every rank's shard, back to back, and sends each its own.
    torch::Tensor packed;
    if (group.rank() == 0) {
      packed = torch::empty({world * s}, fp32);
      layout.pack(params, packed);
    }
    group.scatter_into(shard, packed, /*root=*/0);
  }
  // bf16 weights: the masters start as the bf16 values the model would be loaded in.
  if (!settings_.mixed_precision) shard = shard.to(torch::kBFloat16).to(torch::kFloat);
  return shard;
}

void VeOmniEngine::shard_model() {
  const MixedPrecisionConfig& mp = args_.engine.mixed_precision;
  // bf16 weights compute in bf16 (the constructor's default); fp32 masters compute in param_dtype. No scaler in
  // either mode.
  const c10::ScalarType param = settings_.mixed_precision ? mp.param_dtype : c10::kBFloat16;
  set_precision(Precision{param, mp.reduce_dtype, mp.buffer_dtype}, nullptr, args_.engine.grad_scaler.enabled);

  fsdp::FsdpOptions options;
  options.layout = fsdp::ShardingLayout::kPerParameter;  // VeOmni shards with FSDP2's per-parameter layout
  options.precision.param_dtype = param;
  options.precision.reduce_dtype = mp.reduce_dtype;
  options.buffer_dtype = mp.buffer_dtype;
  options.reshard_after_forward = settings_.enable_full_shard;
  groups_ = fsdp::DpGroups::create(args_, /*fsdp_size=*/-1);
  torch::NoGradGuard no_grad;
  fsdp_ = std::make_unique<fsdp::FsdpModule>(
      model_, groups_, options, device_,
      [this](size_t, const std::vector<torch::Tensor>& params, const fsdp::ShardLayout& layout) {
        return scatter_shard(params, layout);
      });
}

torch::Tensor VeOmniEngine::optimizer_step() {
  auto norm = FSDPEngine::optimizer_step();
  if (!settings_.mixed_precision) round_masters_to_bf16();
  return norm;
}

void VeOmniEngine::round_masters_to_bf16() {
  torch::NoGradGuard no_grad;
  for (auto& u : fsdp_->units()) u.shard().copy_(u.shard().to(torch::kBFloat16));
}

}  // namespace veomni
}  // namespace enginery
