#pragma once
// One FSDP unit (a decoder layer, the embeddings, the head): its fp32 master shard, its fp32 shard gradient and the
// life cycle of its full parameters, with FSDP2's named stages: unshard (cast + all-gather), reshard (free the
// storage, keeping the tensor objects the model holds), reduce_grads (pack full grads in reduce_dtype,
// reduce-scatter, all-reduce across HSDP replicas, accumulate into the shard gradient, free full grads).
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "plugin/fsdp/collectives.h"
#include "plugin/fsdp/copy_stream.h"
#include "plugin/fsdp/fsdp_export.h"
#include "plugin/fsdp/shard_layout.h"

namespace enginery {
namespace fsdp {

struct UnitPrecision {
  c10::ScalarType param_dtype = c10::kBFloat16;
  c10::ScalarType reduce_dtype = c10::kFloat;
};

class ENGINERY_FSDP_API FsdpUnit {
 public:
  enum class State { kSharded, kUnsharded };

  // `params` are the module's own parameter tensors (with their names); from here on they hold the full
  // parameters in param_dtype whenever the unit is unsharded and have no storage when it is sharded.
  // `shard_group` shards; `replicate_group` (may be null) all-reduces gradients across HSDP replicas.
  // Built from this rank's master shard alone (fp32 [S] of ShardLayout::create(layout, shapes of `params`, shard
  // group size)): the full parameters are never materialised here; `params` become param_dtype tensors of their
  // shapes with no storage and the unit starts sharded.
  FsdpUnit(std::string name, std::vector<std::string> param_names, std::vector<torch::Tensor> params,
           torch::Tensor shard, ShardingLayout layout, UnitPrecision precision,
           const Collectives* shard_group, const Collectives* replicate_group, const torch::Device& device);

  const std::string& name() const { return name_; }
  State state() const { return state_; }
  const std::vector<std::string>& param_names() const { return param_names_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  const ShardLayout& layout() const { return *layout_; }

  void unshard();
  void reshard();
  // Gradient reduction of this unit's full gradients (collective over the shard and replicate groups).
  void reduce_grads();
  bool has_full_grads() const;

  // fp32 [S], this rank's master parameters. A caller may write through it, so the compute copy (below) and an
  // upload started before are forgotten: write before the next unshard (a writer that keeps the reference across one
  // calls shard() again after writing).
  torch::Tensor& shard() {
    compute_copy_fresh_ = false;
    drop_prefetched_shard();
    return shard_;
  }
  const torch::Tensor& shard() const { return shard_; }
  // [S], fp32 — or bf16 where that holds it exactly (below). A pending zero is carried out first; holders of the
  // tensor (the optimizer) call settle_shard_grad(). The tensor object stays; its storage and dtype change in place.
  torch::Tensor& shard_grad() {
    settle_shard_grad();
    return shard_grad_;
  }
  // As FSDP2's zero_grad(set_to_none=True): the storage is released until the first reduction after it, which
  // writes the shard gradient instead of adding to it. settle_shard_grad() materialises the zeros if still pending.
  void zero_shard_grad();
  void settle_shard_grad();
  // The shard gradient as it is, a pending zero left pending (an empty tensor on the shard's device): what
  // FSDPEngine::move_state moves, which must not materialise zeros it is about to copy.
  torch::Tensor& shard_grad_unsettled() { return shard_grad_; }
  // Whether the unit holds a gradient: false between zero_grad and the first reduction (the offloaded host buffer
  // keeps its storage through a zero, so its size alone does not say).
  bool holds_shard_grad() const { return shard_grad_.numel() > 0 && !zero_pending_; }

  // With param_dtype bf16, one rank in the shard and replicate groups and fp32 reduction, the reduction is the
  // identity, so the fp32 gradient of a step with a single reduction holds exactly the bf16 values autograd made:
  // storing them in bf16 loses nothing and halves the buffer (a second reduction onto them promotes to fp32 first).
  // On by default; off stores fp32 as written.
  void set_keep_exact_bf16_grads(bool keep) { keep_exact_bf16_grads_ = keep; }

  // Full parameters gathered from the master shards (collective), in param_names() order, in `dtype`: the shard
  // is cast before the all-gather, so a bf16 export moves half the bytes of an fp32 one and is bitwise the fp32
  // gather cast afterwards. Views of one fresh buffer (never of the master shard) where the layout aliases it.
  std::vector<torch::Tensor> gather_full(c10::ScalarType dtype) const;
  std::vector<torch::Tensor> gather_full_master() const { return gather_full(shard_.scalar_type()); }

  // engine.param_offload (fsdp_param_offload.cpp): the master shard and the shard gradient move into the host memory
  // of `copies` for good (the tensor objects stay, so the optimizer follows). unshard() then uploads the master
  // (prefetch_shard() starts that earlier, on a side stream, while another unit computes) and reduce_grads()
  // downloads the reduced gradient after taking its norm on the device (shard_grad_norm()). The host's pinned
  // gradient buffer is kept across zero_grad (host memory is what offloading spends); a pending zero is a flag.
  void keep_master_on_host(std::shared_ptr<CopyStream> copies);
  bool master_on_host() const { return copies_ != nullptr; }
  void prefetch_shard();
  // Forgets an upload nobody consumed (the master may change before the next unshard).
  void drop_prefetched_shard();
  // fp32 0-dim on the device: the 2-norm of the shard gradient, accumulated in fp32 (0 for a pending zero). With
  // the master on the host it was taken at the reduction that produced the gradient, so the step needs no upload
  // for the norm.
  torch::Tensor shard_grad_norm();

  // engine.param_offload with a param_dtype other than fp32: a pinned host copy of the master in param_dtype, which
  // unshard() uploads in place of the fp32 master: half the bytes over the bus for every forward and backward, and
  // the same values (unshard's own cast). Fresh from the streamed optimizer step (which writes it from the updated
  // master already on the device) until the master is written: shard() forgets it, and an unshard that finds it
  // stale uploads the fp32 master, casts, and writes it back. Undefined without offload or with fp32 compute.
  const torch::Tensor& compute_copy() const { return compute_copy_; }
  bool compute_copy_fresh() const { return compute_copy_fresh_; }
  void set_compute_copy_fresh(bool fresh) { compute_copy_fresh_ = fresh && compute_copy_.defined(); }

 private:
  void free_full_storage();
  void alloc_full_storage();
  bool accumulate_full_grads_in_place();
  void adopt_shard_grad(const torch::Tensor& fresh);
  void promote_shard_grad_to_fp32();
  torch::Tensor master_for_unshard();
  void land_reduced_grad(torch::Tensor reduced);

  std::string name_;
  std::vector<std::string> param_names_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<ShardLayout> layout_;
  UnitPrecision precision_;
  const Collectives* shard_group_;
  const Collectives* replicate_group_;
  torch::Device device_;
  torch::Tensor shard_;
  torch::Tensor shard_grad_;
  torch::Tensor gathered_;  // [world * S] in param_dtype; fsdp: the full parameters are views of it
  State state_ = State::kUnsharded;
  bool zero_pending_ = false;
  bool keep_exact_bf16_grads_ = true;
  std::shared_ptr<CopyStream> copies_;  // set: the master and its gradient live on the host
  CopyStream::Pending prefetched_;      // an upload of the master started by prefetch_shard()
  torch::Tensor grad_norm_;             // host-resident gradient: its norm, taken on the device
  torch::Tensor compute_copy_;          // param_dtype copy of the host master (engine.param_offload)
  bool compute_copy_fresh_ = false;
  std::shared_ptr<c10::Event> compute_copy_written_;  // the download that last wrote it
};

}  // namespace fsdp
}  // namespace enginery
