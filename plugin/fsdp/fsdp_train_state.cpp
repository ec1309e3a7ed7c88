// Train state (host_api/exports.h; docs/ARCHITECTURE.md, "The contract"): this rank's pieces of the fp32 masters
// and of their gradients as views into the units' shards, at the flat ranges the shard export names; AdamW's
// hyperparameters and the next step's learning rate, read and written between steps.
#include <cmath>
#include <cstdio>
#include <string>

#include "host_api/error.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "plugin/fsdp/hf_param_names.h"

namespace enginery {
namespace fsdp {

std::vector<LocalParameter> FSDPEngine::local_parameters() {
  torch::NoGradGuard no_grad;
  FsdpModule& module = sharded_module("local_parameters");
  std::vector<LocalParameter> out;
  // Gradients a single reduction left in bf16 (FsdpUnit::set_keep_exact_bf16_grads) become fp32 first, as before an
  // unscale or a clip: the views then are the storage the next step reads, so a write through them reaches it.
  if (optimizer_) optimizer_->promote_grads_to_param_dtype();
  HfParamNames hf_names(*model_);
  const int64_t shard_rank = module.groups().shard->rank();
  for (FsdpUnit& unit : module.units()) {
    const ShardLayout& layout = unit.layout();
    torch::Tensor& shard = unit.shard();  // the writable master: a write makes the unit re-derive its compute copy
    const bool has_grad = unit.holds_shard_grad();
    const size_t first = out.size();
    for (size_t i = 0; i < layout.num_params(); ++i) {
      out.push_back({hf_names.of(unit, i), layout.shape(i), 0, shard.narrow(0, 0, 0),
                     has_grad ? unit.shard_grad().narrow(0, 0, 0) : torch::Tensor()});
    }
    for (const ShardRange& r : layout.owned_ranges(shard_rank)) {
      LocalParameter& piece = out[first + r.param];
      piece.flat_offset = r.begin;
      piece.param = shard.narrow(0, r.shard_offset, r.end - r.begin);
      if (has_grad) piece.grad = unit.shard_grad().narrow(0, r.shard_offset, r.end - r.begin);
    }
  }
  return out;
}

OptimizerHyperparameters FSDPEngine::optimizer_hyperparameters() const {
  require_trainable("optimizer hyperparameters");
  if (!optimizer_ || !lr_scheduler_) {
    throw EngineryError("optimizer hyperparameters before initialize() built the optimizer",
                        "fsdp engine, rank " + std::to_string(args_.rank));
  }
  OptimizerHyperparameters h;
  h.lr = lr_scheduler_->lr();
  h.beta1 = optimizer_->beta1();
  h.beta2 = optimizer_->beta2();
  h.eps = optimizer_->eps();
  h.weight_decay = optimizer_->weight_decay();
  return h;
}

// torch.optim.AdamW's ranges, each refused by its param_group key.
void FSDPEngine::set_optimizer_hyperparameters(const OptimizerHyperparameters& h) {
  const auto check = [](bool ok, const std::string& key, double value, const std::string& allowed) {
    if (!ok || !std::isfinite(value)) {
      char text[32];
      std::snprintf(text, sizeof(text), "%g", value);
      throw EngineryError(key + " = " + text, "optimizer param_groups", allowed);
    }
  };
  check(h.lr >= 0.0, "lr", h.lr, "a finite number >= 0");
  check(h.beta1 >= 0.0 && h.beta1 < 1.0, "betas[0]", h.beta1, "0 <= beta < 1");
  check(h.beta2 >= 0.0 && h.beta2 < 1.0, "betas[1]", h.beta2, "0 <= beta < 1");
  check(h.eps >= 0.0, "eps", h.eps, "a finite number >= 0");
  check(h.weight_decay >= 0.0, "weight_decay", h.weight_decay, "a finite number >= 0");
  optimizer_hyperparameters();  // refuses before initialize()
  optimizer_->set_hyperparameters(h.beta1, h.beta2, h.eps, h.weight_decay);
  if (h.lr != lr_scheduler_->lr()) lr_scheduler_->set_lr(h.lr);
}

}  // namespace fsdp
}  // namespace enginery
