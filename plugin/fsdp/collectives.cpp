#include "plugin/fsdp/collectives.h"

#include "host_api/error.h"

namespace enginery {
namespace fsdp {
namespace {

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceOp::kMax: return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case ReduceOp::kMin: return c10d::ReduceOp(c10d::ReduceOp::MIN);
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

// Gathers only move bytes, so bf16 travels as fp16, a 2-byte type every Gloo collective accepts.
torch::Tensor as_gatherable(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kBFloat16) return t.view(torch::kHalf);
  return t;
}

}  // namespace

Collectives::Collectives(c10::intrusive_ptr<compat::CommGroup> group, int64_t rank, int64_t size)
    : group_(std::move(group)), rank_(rank), size_(size) {
  if (!group_ && size_ != 1) {
    throw EngineryError("no process group for a data-parallel group of size " + std::to_string(size_),
                        "fsdp collectives, rank " + std::to_string(rank_));
  }
}

bool Collectives::native_base_ops() const { return group_ && group_->getBackendName() == "nccl"; }

void Collectives::all_gather_into(torch::Tensor& out, const torch::Tensor& in) const {
  if (out.numel() != in.numel() * size_) {
    throw EngineryError("out has " + std::to_string(out.numel()) + " elements, expected " +
                            std::to_string(in.numel() * size_),
                        "Collectives::all_gather_into");
  }
  if (size_ == 1) {
    out.view(-1).copy_(in.view(-1));
    return;
  }
  if (native_base_ops()) {
    auto src = in.contiguous();
    group_->_allgather_base(out, src)->wait();
    return;
  }
  auto src = as_gatherable(in.contiguous().view(-1));
  auto dst = as_gatherable(out.view(-1));
  std::vector<torch::Tensor> inputs{src};
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int64_t r = 0; r < size_; ++r) outputs[0].push_back(dst.narrow(0, r * src.numel(), src.numel()));
  group_->allgather(outputs, inputs)->wait();
}

void Collectives::reduce_scatter_into(torch::Tensor& out, const torch::Tensor& in) const {
  if (in.numel() != out.numel() * size_) {
    throw EngineryError("in has " + std::to_string(in.numel()) + " elements, expected " +
                            std::to_string(out.numel() * size_),
                        "Collectives::reduce_scatter_into");
  }
  if (size_ == 1) {
    out.view(-1).copy_(in.view(-1));
    return;
  }
  if (native_base_ops()) {
    auto src = in.contiguous();
    group_->_reduce_scatter_base(out, src)->wait();
    return;
  }
  // Emulation: all-reduce the whole buffer, keep this rank's slice.
  auto full = in.contiguous().view(-1).clone();
  all_reduce(full, ReduceOp::kSum);
  out.view(-1).copy_(full.narrow(0, rank_ * out.numel(), out.numel()));
}

void Collectives::scatter_into(torch::Tensor& out, const torch::Tensor& in, int64_t root) const {
  if (rank_ == root) {
    TORCH_CHECK(in.numel() == out.numel() * size_, "scatter_into: in has ", in.numel(), " elements, expected ",
                out.numel() * size_);
  }
  if (size_ == 1) {
    out.view(-1).copy_(in.view(-1));
    return;
  }
  // Gloo and NCCL both scatter natively (c10d's list form); bf16 moves as fp16 for Gloo like a gather.
  auto dst = as_gatherable(out.view(-1));
  std::vector<torch::Tensor> outputs{dst};
  std::vector<std::vector<torch::Tensor>> inputs;
  if (rank_ == root) {
    auto src = as_gatherable(in.contiguous().view(-1));
    inputs.emplace_back();
    for (int64_t r = 0; r < size_; ++r) inputs[0].push_back(src.narrow(0, r * dst.numel(), dst.numel()));
  }
  c10d::ScatterOptions opts;
  opts.rootRank = root;
  group_->scatter(outputs, inputs, opts)->wait();
}

void Collectives::all_to_all_into(torch::Tensor& out, const torch::Tensor& in) const {
  if (out.numel() != in.numel() || in.numel() % size_ != 0 || !out.is_contiguous()) {
    throw EngineryError("out (" + std::to_string(out.numel()) + " elements) and in (" + std::to_string(in.numel()) +
                            ") must be contiguous and of one size divisible by " + std::to_string(size_),
                        "Collectives::all_to_all_into");
  }
  if (size_ == 1) {
    out.view(-1).copy_(in.view(-1));
    return;
  }
  // Equal splits (empty split lists) on both backends; an all-to-all only moves bytes, so bf16 travels as fp16.
  auto src = as_gatherable(in.contiguous().view(-1));
  auto dst = as_gatherable(out.view(-1));
  std::vector<int64_t> equal_splits;
  group_->alltoall_base(dst, src, equal_splits, equal_splits)->wait();
}

void Collectives::all_reduce(torch::Tensor& t, ReduceOp op) const {
  if (size_ == 1) return;
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  const bool gloo_bf16 = !native_base_ops() && t.scalar_type() == torch::kBFloat16;
  if (gloo_bf16 || !t.is_contiguous()) {
    std::vector<torch::Tensor> v{gloo_bf16 ? t.to(torch::kFloat) : t.contiguous()};
    group_->allreduce(v, opts)->wait();
    t.copy_(v[0]);
    return;
  }
  std::vector<torch::Tensor> v{t};
  group_->allreduce(v, opts)->wait();
}

void Collectives::broadcast(torch::Tensor& t, int64_t root) const {
  if (size_ == 1) return;
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  std::vector<torch::Tensor> v{as_gatherable(t.contiguous())};
  group_->broadcast(v, opts)->wait();
  if (!t.is_contiguous()) t.copy_(v[0].view(t.scalar_type()));
}

void Collectives::barrier() const {
  if (size_ == 1) return;
  group_->barrier()->wait();
}

}  // namespace fsdp
}  // namespace enginery
