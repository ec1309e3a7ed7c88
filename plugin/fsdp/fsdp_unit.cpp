#include "plugin/fsdp/fsdp_unit.h"

#include <c10/core/DeviceGuard.h>

#include <cmath>

#include "host_api/error.h"
#include "kernels/fused_cuda.h"

namespace enginery {
namespace fsdp {
namespace {

// FSDP2's trick: the tensor objects stay (autograd and the model hold them), only their storage comes and goes.
void resize_storage(const torch::Tensor& t, size_t nbytes) {
  c10::OptionalDeviceGuard guard(t.device());
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == nbytes) return;
  impl->set_data_ptr(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

size_t full_nbytes(const torch::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Both constructors lay out the unit's parameters the same way, whether or not their values are present.
std::unique_ptr<ShardLayout> layout_of(const std::vector<torch::Tensor>& params, ShardingLayout layout,
                                       int64_t world) {
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& p : params) shapes.push_back(p.sizes().vec());
  return ShardLayout::create(layout, std::move(shapes), world);
}

}  // namespace

FsdpUnit::FsdpUnit(std::string name, std::vector<std::string> param_names, std::vector<torch::Tensor> params,
                   torch::Tensor shard, ShardingLayout layout, UnitPrecision precision,
                   const Collectives* shard_group, const Collectives* replicate_group, const torch::Device& device)
    : name_(std::move(name)),
      param_names_(std::move(param_names)),
      params_(std::move(params)),
      precision_(precision),
      shard_group_(shard_group),
      replicate_group_(replicate_group),
      device_(device) {
  layout_ = layout_of(params_, layout, shard_group_->size());
  const int64_t s = layout_->shard_numel();
  if (shard.numel() != s) {
    throw EngineryError("unit '" + name_ + "' got a shard of " + std::to_string(shard.numel()) +
                            " elements, its layout needs " + std::to_string(s),
                        "fsdp unit from shard, rank " + std::to_string(shard_group_->rank()));
  }
  const auto fp32 = torch::TensorOptions().dtype(torch::kFloat).device(device_);
  shard_ = shard.reshape({s}).to(fp32).clone();
  shard_grad_ = torch::zeros({s}, fp32);

  // Metadata only: tensors of the full shapes whose storage has zero bytes (the sharded state).
  torch::NoGradGuard no_grad;
  const auto pdt = torch::TensorOptions().dtype(precision_.param_dtype).device(device_);
  auto storage_less = [&](const std::vector<int64_t>& shape) {
    auto t = torch::empty({0}, pdt);
    t.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
    return t;
  };
  if (layout_->aliases_packed()) {
    // Views are only cut from a buffer whose storage covers them (ATen checks the bounds), so the buffer is
    // allocated for that moment and freed right after: the gathered state, resharded.
    gathered_ = torch::empty({layout_->world() * s}, pdt);
    auto views = layout_->unpack(gathered_);
    for (size_t i = 0; i < params_.size(); ++i) params_[i].set_data(views[i]);
    free_full_storage();
  } else {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].set_data(storage_less(layout_->shape(i)));
  }
  state_ = State::kSharded;
}

void FsdpUnit::free_full_storage() {
  if (layout_->aliases_packed()) {
    resize_storage(gathered_, 0);
  } else {
    for (auto& p : params_) resize_storage(p, 0);
  }
}

void FsdpUnit::alloc_full_storage() {
  if (layout_->aliases_packed()) {
    resize_storage(gathered_, full_nbytes(gathered_));
  } else {
    for (auto& p : params_) resize_storage(p, full_nbytes(p));
  }
}

void FsdpUnit::unshard() {
  if (state_ == State::kUnsharded) return;
  RECORD_USER_SCOPE("fsdp::unshard");
  torch::NoGradGuard no_grad;
  // The master on the device: the shard itself, or its upload from host memory (engine.param_offload).
  const torch::Tensor master = copies_ ? master_for_unshard() : shard_;
  alloc_full_storage();
  if (shard_group_->size() == 1) {
    // Nothing to gather: cast the master shard straight into the full parameters (one pass, no staging buffers).
    if (layout_->aliases_packed()) {
      gathered_.copy_(master);
    } else {
      auto full = layout_->unpack(master);
      for (size_t i = 0; i < params_.size(); ++i) params_[i].variable_data().copy_(full[i]);
    }
    state_ = State::kUnsharded;
    return;
  }
  auto local = master.to(precision_.param_dtype);
  if (layout_->aliases_packed()) {
    shard_group_->all_gather_into(gathered_, local);
  } else {
    auto gathered = torch::empty({layout_->world() * layout_->shard_numel()}, local.options());
    shard_group_->all_gather_into(gathered, local);
    auto full = layout_->unpack(gathered);
    // variable_data(): a fresh version counter, so refilling a parameter that autograd saved is not an in-place
    // modification in its eyes (the saved tensor and this one share the storage we just refilled).
    for (size_t i = 0; i < params_.size(); ++i) params_[i].variable_data().copy_(full[i]);
  }
  state_ = State::kUnsharded;
}

void FsdpUnit::reshard() {
  if (state_ == State::kSharded) return;
  free_full_storage();
  state_ = State::kSharded;
}

bool FsdpUnit::has_full_grads() const {
  for (const auto& p : params_) {
    if (p.grad().defined()) return true;
  }
  return false;
}

void FsdpUnit::adopt_shard_grad(const torch::Tensor& fresh) {
  torch::NoGradGuard no_grad;
  shard_grad_.set_data(fresh);
  zero_pending_ = false;
}

void FsdpUnit::promote_shard_grad_to_fp32() {
  if (shard_grad_.scalar_type() != torch::kFloat) adopt_shard_grad(shard_grad_.to(torch::kFloat));
}

void FsdpUnit::zero_shard_grad() {
  torch::NoGradGuard no_grad;
  if (copies_) {  // the pinned buffer stays; the next reduction overwrites it
    zero_pending_ = true;
    grad_norm_ = torch::Tensor();
    return;
  }
  shard_grad_.set_data(torch::empty({0}, shard_.options()));
  zero_pending_ = true;
}

void FsdpUnit::settle_shard_grad() {
  if (copies_) {
    copies_->synchronize();  // a download into the host gradient may still be under way
    if (!zero_pending_) return;
    shard_grad_.zero_();
    grad_norm_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat).device(device_));
    zero_pending_ = false;
    return;
  }
  if (!zero_pending_) return;
  adopt_shard_grad(torch::zeros({layout_->shard_numel()}, shard_.options()));
}

// One rank: the "reduction" of the fp32 sum is the identity, so each full gradient goes straight into its slice of
// the shard gradient instead of being packed, copied and added: after a zero it is written (in bf16 where that is
// exact, see set_keep_exact_bf16_grads), else added in fp32 (fp32 += param_dtype in one kernel). Works where the
// layout's views of the shard gradient alias it and cover it (every layout at one rank); false (nothing done)
// otherwise.
bool FsdpUnit::accumulate_full_grads_in_place() {
  const int64_t s = layout_->shard_numel();
  {
    int64_t covered = 0;  // the master shard has the gradient's layout: its views tell
    for (const auto& v : layout_->unpack(shard_)) {
      if (!v.is_alias_of(shard_)) return false;
      covered += v.numel();
    }
    if (covered != s) return false;
  }
  const bool overwrite = zero_pending_;
  if (overwrite) {
    const bool exact_bf16 = keep_exact_bf16_grads_ && precision_.param_dtype == torch::kBFloat16;
    adopt_shard_grad(torch::empty({s}, shard_.options().dtype(exact_bf16 ? torch::kBFloat16 : torch::kFloat)));
  } else {
    promote_shard_grad_to_fp32();  // a second reduction sums: fp32 from here on
  }
  auto views = layout_->unpack(shard_grad_);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& grad = params_[i].mutable_grad();
    if (!grad.defined()) {
      if (overwrite) views[i].zero_();
      continue;
    }
    if (overwrite && views[i].scalar_type() == grad.scalar_type()) {
      views[i].copy_(grad);
    } else if (kernels::applies(grad, kernels::Kernel::kAccumulate) && views[i].is_contiguous()) {
      // ATen's mixed-dtype add is an unvectorised kernel at a third of the copy bandwidth; ours reads each 16 bytes.
      kernels::accumulate_(views[i], grad, overwrite);
    } else if (overwrite) {
      views[i].copy_(grad);
    } else {
      views[i].add_(grad);
    }
    grad.reset();
  }
  return true;
}

void FsdpUnit::reduce_grads() {
  RECORD_USER_SCOPE("fsdp::reduce_grads");
  torch::NoGradGuard no_grad;
  if (!copies_ && shard_group_->size() == 1 && (replicate_group_ == nullptr || replicate_group_->size() == 1) &&
      precision_.reduce_dtype == torch::kFloat && accumulate_full_grads_in_place()) {
    return;
  }
  std::vector<torch::Tensor> grads;
  for (const auto& p : params_) grads.push_back(p.grad());
  const int64_t s = layout_->shard_numel();
  const auto rdt = torch::TensorOptions().dtype(precision_.reduce_dtype).device(device_);
  auto packed = torch::empty({layout_->world() * s}, rdt);
  layout_->pack(grads, packed);
  for (auto& p : params_) p.mutable_grad().reset();  // free the full grads before the shard buffers grow
  // fp16 sums can overflow: divide by about sqrt(ranks) before the reduction and multiply back after (docs/ARCHITECTURE.md, "Precision");
  // the result is still the SUM over ranks.
  const int64_t ranks = shard_group_->size() * (replicate_group_ != nullptr ? replicate_group_->size() : 1);
  const double prediv = precision_.reduce_dtype == c10::kHalf && ranks > 1 ? std::sqrt(static_cast<double>(ranks)) : 1.0;
  if (prediv != 1.0) packed.div_(prediv);
  auto reduced = torch::empty({s}, rdt);
  shard_group_->reduce_scatter_into(reduced, packed);
  if (replicate_group_ != nullptr && replicate_group_->size() > 1) replicate_group_->all_reduce(reduced);
  auto reduced_fp32 = reduced.to(torch::kFloat);
  if (prediv != 1.0) reduced_fp32.mul_(prediv);
  if (copies_) {
    land_reduced_grad(reduced_fp32);
    return;
  }
  if (zero_pending_) {
    adopt_shard_grad(reduced_fp32);  // a fresh buffer of this reduction: it becomes the shard gradient
  } else {
    promote_shard_grad_to_fp32();
    shard_grad_.add_(reduced_fp32);
  }
}

std::vector<torch::Tensor> FsdpUnit::gather_full(c10::ScalarType dtype) const {
  // to(device_) as well: the shard may live in host memory (offloaded) while the collective runs on the device.
  const auto local = shard_.to(device_, dtype);
  // Alone, the full tensors are the shard: a cast or a move already made a fresh buffer to hand out, else a copy
  // does (the caller owns what it gets, host_api/exports.h: the master shard itself never leaves).
  if (layout_->world() == 1) return layout_->unpack(local.is_same(shard_) ? shard_.clone() : local);
  auto gathered = torch::empty({layout_->world() * layout_->shard_numel()}, local.options());
  shard_group_->all_gather_into(gathered, local);
  return layout_->unpack(gathered);
}

}  // namespace fsdp
}  // namespace enginery
