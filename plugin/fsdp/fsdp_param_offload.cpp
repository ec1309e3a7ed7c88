// FsdpUnit with engine.param_offload (docs/ARCHITECTURE.md, "The contract", offload while computing): the fp32 master
// shard and the shard gradient live in pinned host memory; the device holds a unit's master only between its upload and
// its all-gather, and its reduced gradient only until the download has read it.
#include "host_api/error.h"
#include "plugin/fsdp/fsdp_unit.h"

namespace enginery {
namespace fsdp {
namespace {

// The same per-tensor reduction the resident optimizer step uses for an fp32 gradient (one multi-tensor pass), so
// a norm taken here equals the one the step would take over the same values.
torch::Tensor norm_of(const torch::Tensor& grad) {
  if (grad.scalar_type() == torch::kFloat) return at::_foreach_norm({grad}, 2)[0];
  return at::linalg_vector_norm(grad, 2, c10::nullopt, false, torch::kFloat);
}

}  // namespace

void FsdpUnit::keep_master_on_host(std::shared_ptr<CopyStream> copies) {
  if (state_ != State::kSharded) {
    throw EngineryError("unit '" + name_ + "' is gathered; the master moves to the host between steps only",
                        "fsdp unit, engine.param_offload");
  }
  torch::NoGradGuard no_grad;
  copies_ = std::move(copies);
  move_to_host(shard_, *copies_);
  if (precision_.param_dtype != torch::kFloat) {
    compute_copy_ = copies_->host_empty({layout_->shard_numel()}, precision_.param_dtype);
    compute_copy_fresh_ = false;  // written by the first unshard
  }
  if (zero_pending_) {  // no storage until the first reduction: the host buffer is allocated once, here
    shard_grad_.set_data(copies_->host_empty({layout_->shard_numel()}, torch::kFloat).zero_());
    return;
  }
  promote_shard_grad_to_fp32();  // downloads write fp32 (exact bf16 storage is a single-rank device shortcut)
  grad_norm_ = norm_of(shard_grad_);
  move_to_host(shard_grad_, *copies_);
}

void FsdpUnit::prefetch_shard() {
  if (!copies_ || state_ != State::kSharded || prefetched_.tensor.defined()) return;
  if (!compute_copy_fresh_) {
    prefetched_ = copies_->upload(shard_);
    return;
  }
  prefetched_ = copies_->upload(compute_copy_, compute_copy_written_);
}

void FsdpUnit::drop_prefetched_shard() {
  if (!prefetched_.tensor.defined()) return;
  // The upload's destination returns to the compute stream's pool when dropped: that stream must not reuse the
  // block before the copy into it is done.
  copies_->wait_for(prefetched_);
  prefetched_ = {};
}

torch::Tensor FsdpUnit::master_for_unshard() {
  prefetch_shard();  // not prefetched: the upload starts now
  CopyStream::Pending master = std::move(prefetched_);
  prefetched_ = {};
  copies_->wait_for(master);
  if (!compute_copy_.defined() || master.tensor.scalar_type() == compute_copy_.scalar_type()) return master.tensor;
  // The fp32 master came up (the copy was stale): cast as unshard would, and keep the cast for the next uploads.
  auto cast = master.tensor.to(precision_.param_dtype);
  compute_copy_written_ = copies_->download_into(compute_copy_, cast);
  compute_copy_fresh_ = true;
  return cast;
}

// `reduced` is this reduction's fp32 gradient on the device. After a zero it becomes the host gradient; otherwise
// it is added to it on the device first (old + new, the order the resident path adds in), so the norm below is
// the norm of what the host will hold.
void FsdpUnit::land_reduced_grad(torch::Tensor reduced) {
  if (!zero_pending_) {
    copies_->synchronize();  // the previous download into the host gradient is complete
    CopyStream::Pending old = copies_->upload(shard_grad_);
    copies_->wait_for(old);
    reduced = old.tensor.add_(reduced);
  }
  grad_norm_ = norm_of(reduced);
  copies_->download_into(shard_grad_, reduced);
  zero_pending_ = false;
}

torch::Tensor FsdpUnit::shard_grad_norm() {
  settle_shard_grad();
  if (copies_) return grad_norm_;
  return norm_of(shard_grad_);
}

}  // namespace fsdp
}  // namespace enginery
