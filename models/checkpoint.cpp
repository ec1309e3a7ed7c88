// Gradient checkpointing of one decoder layer, or of its MLP block (Recompute in layers.h): a custom autograd
// function that keeps only the region's input and recomputes the region in backward.
#include <torch/csrc/autograd/custom_function.h>

#include "host_api/error.h"
#include "models/layers.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Which part of the layer a CheckpointFunction runs.
enum class Region : int64_t { kLayer, kMlpBlock };

torch::Tensor run_region(DecoderLayerImpl& layer, Region region, const torch::Tensor& x, const AttentionContext& ctx) {
  return region == Region::kLayer ? layer.forward(x, ctx) : layer.mlp_block(x, ctx);
}

std::vector<torch::Tensor> region_parameters(DecoderLayerImpl& layer, Region region) {
  return region == Region::kLayer ? layer.parameters() : layer.mlp_block_parameters();
}

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `params` are inputs only so that autograd routes their gradients; the layer reads its own registered tensors.
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, at::TensorList params, DecoderLayerImpl* layer,
                               int64_t region, const AttentionContext* attn) {
    const auto device = x.device().type();
    ctx->save_for_backward({x});
    ctx->saved_data["region"] = region;
    // saved_data holds IValues only: the layer (owned by the model, which outlives its graphs) goes in as an address.
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["num_params"] = static_cast<int64_t>(params.size());
    ctx->saved_data["cos"] = attn->rope.cos;
    ctx->saved_data["sin"] = attn->rope.sin;
    ctx->saved_data["has_mask"] = attn->mask.defined();
    if (attn->mask.defined()) ctx->saved_data["mask"] = attn->mask;
    ctx->saved_data["packed"] = attn->packed.defined();
    if (attn->packed.defined()) {
      ctx->saved_data["cu_seqlens"] = attn->packed.cu_seqlens;
      ctx->saved_data["offsets"] = torch::tensor(attn->packed.offsets, torch::kLong);
      ctx->saved_data["max_len"] = attn->packed.max_len;
    }
    ctx->saved_data["sequence_parallel"] = reinterpret_cast<int64_t>(attn->sequence_parallel);  // engine-owned
    ctx->saved_data["autocast"] = compat::autocast_enabled(device);
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(compat::autocast_dtype(device));
    return run_region(*layer, static_cast<Region>(region), x, *attn);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const auto region = static_cast<Region>(ctx->saved_data["region"].toInt());
    const auto num_params = ctx->saved_data["num_params"].toInt();
    AttentionContext attn;
    attn.recomputing = true;
    attn.rope = {ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor()};
    if (ctx->saved_data["has_mask"].toBool()) attn.mask = ctx->saved_data["mask"].toTensor();
    if (ctx->saved_data["packed"].toBool()) {
      attn.packed.cu_seqlens = ctx->saved_data["cu_seqlens"].toTensor();
      const auto offsets = ctx->saved_data["offsets"].toTensor();
      attn.packed.offsets.assign(offsets.data_ptr<int64_t>(), offsets.data_ptr<int64_t>() + offsets.numel());
      attn.packed.max_len = ctx->saved_data["max_len"].toInt();
    }
    attn.sequence_parallel =
        reinterpret_cast<const SequenceParallelGroup*>(ctx->saved_data["sequence_parallel"].toInt());
    const bool autocast_on = ctx->saved_data["autocast"].toBool();
    const auto autocast_dtype = static_cast<c10::ScalarType>(ctx->saved_data["autocast_dtype"].toInt());
    auto x = ctx->get_saved_variables()[0];
    // The backward may run on another thread (CUDA autograd threads) whose autocast state is unset: restore the
    // forward's explicitly so the recomputed activations match.
    compat::AutocastScope autocast(x.device().type(), autocast_on ? autocast_dtype : c10::kFloat);
    torch::AutoGradMode grad_mode(true);
    auto x_in = x.detach().requires_grad_(true);
    auto out = run_region(*layer, region, x_in, attn);
    std::vector<torch::Tensor> inputs{x_in};
    std::vector<int64_t> slot;  // index into the returned list for each entry of `inputs` after x
    auto params = region_parameters(*layer, region);
    if (static_cast<int64_t>(params.size()) != num_params) {
      throw EngineryError("a checkpointed layer changed its parameter count", "activation checkpointing");
    }
    for (int64_t i = 0; i < num_params; ++i) {
      if (params[i].requires_grad()) {
        inputs.push_back(params[i]);
        slot.push_back(i);
      }
    }
    auto grads = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    variable_list result(1 + num_params + 3);
    result[0] = grads[0];
    for (size_t j = 0; j < slot.size(); ++j) result[1 + slot[j]] = grads[1 + j];
    return result;  // the last three slots are the layer, the region and the context: no gradient
  }
};

}  // namespace

namespace {

torch::Tensor checkpointed(DecoderLayerImpl& layer, Region region, const torch::Tensor& x, const AttentionContext& ctx) {
  if (!torch::GradMode::is_enabled()) return run_region(layer, region, x, ctx);
  auto params = region_parameters(layer, region);
  return CheckpointFunction::apply(x, at::TensorList(params), &layer, static_cast<int64_t>(region), &ctx);
}

}  // namespace

torch::Tensor checkpointed_layer_forward(DecoderLayerImpl& layer, const torch::Tensor& x, const AttentionContext& ctx) {
  return checkpointed(layer, Region::kLayer, x, ctx);
}

torch::Tensor checkpointed_mlp_block(DecoderLayerImpl& layer, const torch::Tensor& h, const AttentionContext& ctx) {
  return checkpointed(layer, Region::kMlpBlock, h, ctx);
}

}  // namespace models
}  // namespace enginery
