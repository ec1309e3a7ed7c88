#include "plugin/fsdp/fsdp_module.h"

#include <set>

#include "host_api/error.h"

namespace enginery {
namespace fsdp {

namespace {

// The default shard source: every rank holds the full values, packs them and keeps its own slice.
torch::Tensor local_slice(const std::vector<torch::Tensor>& params, const ShardLayout& layout,
                          const Collectives& shard_group, const torch::Device& device) {
  std::vector<torch::Tensor> full_fp32;
  for (const auto& p : params) full_fp32.push_back(p.detach().to(device, torch::kFloat));
  const int64_t s = layout.shard_numel();
  auto packed = torch::empty({layout.world() * s}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  layout.pack(full_fp32, packed);
  return packed.narrow(0, shard_group.rank() * s, s);
}

}  // namespace

FsdpModule::FsdpModule(std::shared_ptr<models::DecoderModel> model, DpGroups groups, FsdpOptions options,
                       const torch::Device& device, const ShardSource& source)
    : model_(std::move(model)), groups_(std::move(groups)), options_(std::move(options)) {
  torch::NoGradGuard no_grad;
  // Every parameter must belong to exactly one unit; a shared one (tied head) is owned by its first unit.
  std::set<const void*> owned;
  auto model_units = model_->units();
  units_.reserve(model_units.size());
  for (size_t i = 0; i < model_units.size(); ++i) {
    const auto& unit = model_units[i];
    std::vector<std::string> names;
    std::vector<torch::Tensor> params;
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& item : unit.module->named_parameters(/*recurse=*/true)) {
      if (!owned.insert(item.value().unsafeGetTensorImpl()).second) continue;
      names.push_back(unit.name + "." + item.key());
      params.push_back(item.value());
      shapes.push_back(item.value().sizes().vec());
    }
    auto layout = ShardLayout::create(options_.layout, std::move(shapes), groups_.shard->size());
    torch::Tensor shard = source ? source(i, params, *layout) : local_slice(params, *layout, *groups_.shard, device);
    units_.emplace_back(unit.name, std::move(names), std::move(params), std::move(shard), options_.layout,
                        options_.precision, groups_.shard.get(), groups_.replicate.get(), device);
  }
  for (const auto& item : model_->named_parameters(/*recurse=*/true)) {
    if (owned.count(item.value().unsafeGetTensorImpl()) == 0) {
      throw EngineryError("parameter '" + item.key() + "' belongs to no unit of the model",
                          "fsdp sharding, model type " + model_->hf_model_type());
    }
  }
  for (auto& buffer : model_->buffers(/*recurse=*/true)) {
    if (buffer.is_floating_point()) buffer.set_data(buffer.to(device, options_.buffer_dtype));
  }
}

FsdpModule::~FsdpModule() = default;

void FsdpModule::pre_forward(size_t unit) {
  units_.at(unit).unshard();
  // A no-op unless the masters are on the host; not in a backward's recomputed forward (activation
  // checkpointing), where the next unit is finished already.
  if (!in_backward_ && unit + 1 < units_.size()) units_[unit + 1].prefetch_shard();
}

void FsdpModule::post_forward(size_t unit, const std::vector<torch::Tensor>& outputs) {
  const bool reshard = options_.reshard_after_forward && unit != 0 && unit + 1 != units_.size();
  if (reshard) units_[unit].reshard();
  if (!torch::GradMode::is_enabled()) return;
  // The gradient of this unit's outputs arrives once the next unit's backward is over (it consumed them): the
  // next unit is finished there, and this one gathered again just before its own backward. Autograd runs every
  // pending gradient accumulation before the node this hook guards, so the next unit's grads are all in place.
  for (const auto& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    out.register_hook([this, unit, reshard](const torch::Tensor&) {
      if (unit + 1 < units_.size()) finish_backward(unit + 1);
      if (reshard) units_[unit].unshard();
      if (unit > 0) units_[unit - 1].prefetch_shard();  // its backward is next (no-op unless offloaded)
    });
  }
}

void FsdpModule::after_forward_only() {
  for (auto& u : units_) u.reshard();
  drop_prefetched();
}

void FsdpModule::before_backward(bool sync) {
  in_backward_ = true;
  sync_in_backward_ = sync;
  finished_.assign(units_.size(), false);
}

void FsdpModule::finish_backward(size_t unit) {
  if (!in_backward_ || finished_[unit]) return;
  finished_[unit] = true;
  if (sync_in_backward_) units_[unit].reduce_grads();
  units_[unit].reshard();
}

void FsdpModule::after_backward(bool sync) {
  // A unit whose outputs got no gradient (unused this step) may still be sharded; unshard() is then a no-op for
  // the rest, and reduce_grads packs zeros for it, so every rank issues the same collectives.
  for (size_t i = 0; i < units_.size(); ++i) {
    if (in_backward_ && finished_[i]) continue;
    if (sync) units_[i].reduce_grads();
    units_[i].reshard();
  }
  in_backward_ = false;
  drop_prefetched();  // recomputed forwards (activation checkpointing) may have started uploads no one takes
}

void FsdpModule::keep_masters_on_host(const std::shared_ptr<CopyStream>& copies) {
  for (auto& u : units_) u.keep_master_on_host(copies);
}

void FsdpModule::drop_prefetched() {
  for (auto& u : units_) u.drop_prefetched_shard();
}

void FsdpModule::settle_grads() {
  for (auto& u : units_) u.settle_shard_grad();
}

void FsdpModule::zero_grad() {
  for (auto& u : units_) {
    u.zero_shard_grad();
    for (const auto& p : u.params()) {
      auto& g = const_cast<torch::Tensor&>(p).mutable_grad();
      g.reset();
    }
  }
}

}  // namespace fsdp
}  // namespace enginery
