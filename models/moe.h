#pragma once
// qwen3_moe's sparse MLP (docs/ARCHITECTURE.md, "Mixture of experts"): a router picks the top k of E experts per
// token from softmax(gate(x)) in fp32, renormalised when norm_topk_prob; each expert is a SwiGLU MLP. Parameters
// keep the names of Hugging Face checkpoints on disk (mlp.gate.weight, mlp.experts.<e>.{gate,up,down}_proj.weight),
// one tensor per expert and projection, so loading, export and FSDP sharding treat them like any other parameter.
#include <torch/torch.h>

#include <vector>

#include "models/layers.h"
#include "models/model_args.h"

namespace enginery {
namespace models {

// How the experts' GEMMs run over the rows sorted by expert (docs/ARCHITECTURE.md, "Mixture of experts").
enum class ExpertGemm {
  kAuto,     // kGrouped where it applies (grouped_gemm_applies), else kPadded
  kGrouped,  // at::_grouped_mm with the groups' end offsets: one kernel, no padding, no host synchronisation
  kPadded,   // each group zero-padded to the largest and torch::bmm over [E, C, K]: any dtype and device
};
// Whether at::_grouped_mm takes rows of `dtype` on `device` with row lengths `k` and `n`: bf16 (CUDA or CPU) or
// fp32 on the CPU, every row a multiple of 16 bytes.
bool grouped_gemm_applies(const torch::Device& device, c10::ScalarType dtype, int64_t k, int64_t n);

// y [M, N]: row r of x [M, K] times expert e's weight^T, where rows are sorted by expert and `counts` [E] (int64,
// on x's device) gives each expert's number of rows. The expert weight is the concatenation over dim 0 of
// weights[e * per_expert .. (e + 1) * per_expert) (each [N / per_expert, K]; per_expert 2 for gate and up at once),
// stacked afresh in forward and again in backward, never saved: an FSDP engine frees the gathered weights after
// the forward and gathers them again before the backward, and a stacked copy kept for backward would hold every
// layer's experts unsharded. Differentiable in x and in each weight; computed in x's dtype (autocast's when on).
torch::Tensor expert_linear(const torch::Tensor& x, const torch::Tensor& counts,
                            const std::vector<torch::Tensor>& weights, int64_t per_expert,
                            ExpertGemm gemm = ExpertGemm::kAuto);

// The router's choice for rows x [N, H]: logits [N, E] (in x's dtype), the top-k experts [N, k] (int64) and their
// weights [N, k] (in x's dtype), as transformers' Qwen3MoeTopKRouter computes them.
struct Routing {
  torch::Tensor logits, experts, weights;
};
Routing route_tokens(const torch::Tensor& x, const torch::Tensor& gate_weight, int64_t top_k, bool normalize);

class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  explicit SparseMoeBlockImpl(const ModelArgs& args);
  // x [..., hidden]; the same shape back.
  torch::Tensor forward(const torch::Tensor& x, ExpertGemm gemm = ExpertGemm::kAuto);

  torch::nn::Linear gate{nullptr};  // the router, [E, hidden], no bias
  std::vector<MLP> experts;         // registered as the ModuleList "experts"

 private:
  int64_t top_k_;
  bool normalize_;
};
TORCH_MODULE(SparseMoeBlock);

// transformers' load_balancing_loss_func (Switch Transformer's auxiliary loss): E * sum_e f_e * P_e over the
// router logits of every sparse layer ([tokens, E] each, the layers' tokens in the same order), with f_e the
// fraction of top-k choices that went to expert e and P_e the mean router probability of e, both over the tokens
// where attention_mask [B, T] is 1 when it is given (the logits' rows then are the B x T positions). Not part of
// enginery's training loss: verl's losses never add it (its actor calls the model without labels, and its Megatron
// path turns the balancing loss off), so a verl user expects none; it is here for a user or a metric that wants it.
torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t num_experts, int64_t top_k,
                                  const torch::Tensor& attention_mask = {});

}  // namespace models
}  // namespace enginery
