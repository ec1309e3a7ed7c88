#include "models/sequence_parallel.h"

#include <algorithm>

namespace enginery {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [n, H, D] -> [size * n, H / size, D] ([Note: Ulysses token and head split]): head block j goes to rank j; what
// comes back from rank i are its n tokens of this rank's heads, so rank order is token order.
torch::Tensor swap_to_heads(const SequenceParallelGroup& g, const torch::Tensor& x) {
  const int64_t s = g.size(), n = x.size(0), h = x.size(1) / s, d = x.size(2);
  auto blocks = x.reshape({n, s, h, d}).permute({1, 0, 2, 3}).contiguous().reshape({-1});
  return g.all_to_all(blocks).view({s * n, h, d});
}

// [size * n, h, D] -> [n, size * h, D]: token block j goes back to rank j; rank i sends this rank's tokens of its
// heads, which are heads [i * h, (i + 1) * h).
torch::Tensor swap_to_sequence(const SequenceParallelGroup& g, const torch::Tensor& x) {
  const int64_t s = g.size(), n = x.size(0) / s, h = x.size(1), d = x.size(2);
  auto received = g.all_to_all(x.contiguous().reshape({-1}));
  return received.view({s, n, h, d}).permute({1, 0, 2, 3}).reshape({n, s * h, d});
}

const SequenceParallelGroup* group_of(AutogradContext* ctx) {
  return reinterpret_cast<const SequenceParallelGroup*>(ctx->saved_data["group"].toInt());
}

// saved_data holds IValues only: the group (owned by the engine, which outlives its graphs) goes in as an address.
class SequenceToHeads : public torch::autograd::Function<SequenceToHeads> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const SequenceParallelGroup* g) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(g);
    return swap_to_heads(*g, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {swap_to_sequence(*group_of(ctx), grad[0]), torch::Tensor()};
  }
};

class HeadsToSequence : public torch::autograd::Function<HeadsToSequence> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const SequenceParallelGroup* g) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(g);
    return swap_to_sequence(*g, x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {swap_to_heads(*group_of(ctx), grad[0]), torch::Tensor()};
  }
};

class GatherSequence : public torch::autograd::Function<GatherSequence> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const SequenceParallelGroup* g) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(g);
    auto shape = x.sizes().vec();
    shape[0] *= g->size();
    return g->all_gather(x.contiguous().reshape({-1})).view(shape);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto* g = group_of(ctx);
    const int64_t n = grad[0].size(0) / g->size();
    return {grad[0].narrow(0, g->rank() * n, n), torch::Tensor()};
  }
};

}  // namespace

SequenceSlice sequence_slice(int64_t tokens, const SequenceParallelGroup& group) {
  SequenceSlice s;
  s.length = (tokens + group.size() - 1) / group.size();
  s.padded = s.length * group.size();
  s.begin = group.rank() * s.length;
  return s;
}

PackedSequences with_padding_sequence(const PackedSequences& seqs, int64_t padded, const torch::Device& device) {
  const int64_t tokens = seqs.offsets.back();
  if (padded == tokens) return seqs;
  PackedSequences out = seqs;
  out.offsets.push_back(padded);
  out.max_len = std::max(out.max_len, padded - tokens);
  out.cu_seqlens = torch::tensor(out.offsets, torch::kLong).to(device, torch::kInt);
  return out;
}

torch::Tensor sequence_to_heads(const SequenceParallelGroup& group, const torch::Tensor& x) {
  return SequenceToHeads::apply(x, &group);
}

torch::Tensor heads_to_sequence(const SequenceParallelGroup& group, const torch::Tensor& x) {
  return HeadsToSequence::apply(x, &group);
}

torch::Tensor gather_sequence(const SequenceParallelGroup& group, const torch::Tensor& x) {
  return GatherSequence::apply(x, &group);
}

torch::Tensor ulysses_causal_attention(const SequenceParallelGroup& group, const torch::Tensor& q,
                                       const torch::Tensor& k, const torch::Tensor& v, const PackedSequences& seqs,
                                       double scale) {
  torch::Tensor keys = k, values = v;
  const int64_t kv_heads = k.size(1), size = group.size();
  if (kv_heads < size) {
    // kv head g becomes heads g * rep .. g * rep + rep - 1, so rank r receives kv head r / rep: the one its query
    // heads [r * H / size, (r + 1) * H / size) read (query head h reads kv head h / (H / kv_heads)).
    const int64_t rep = size / kv_heads;
    keys = k.repeat_interleave(rep, 1);
    values = v.repeat_interleave(rep, 1);
  }
  auto out = packed_causal_attention(sequence_to_heads(group, q), sequence_to_heads(group, keys),
                                     sequence_to_heads(group, values), seqs, scale);
  return heads_to_sequence(group, out);
}

std::vector<int64_t> allowed_sequence_parallel_sizes(int64_t heads, int64_t kv_heads, int64_t world) {
  std::vector<int64_t> sizes;
  for (int64_t s = 1; s <= std::max<int64_t>(world, 1); ++s) {
    if (world % s == 0 && heads % s == 0 && (kv_heads % s == 0 || s % kv_heads == 0)) sizes.push_back(s);
  }
  return sizes;
}

}  // namespace models
}  // namespace enginery
