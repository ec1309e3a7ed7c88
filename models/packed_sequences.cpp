#include "models/packed_sequences.h"

#include <atomic>
#include <iostream>

#include "host_api/error.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {

PackedBatch pack_batch(const torch::Tensor& valid, const torch::Tensor& input_ids, const torch::Tensor& position_ids) {
  PackedBatch p;
  p.index = valid.reshape({-1}).nonzero().squeeze(1);
  if (p.index.numel() == 0) {
    throw EngineryError("a micro-batch without valid tokens cannot be packed", "attention_mask");
  }
  const auto lengths = valid.sum(1).to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* len = lengths.data_ptr<int64_t>();
  p.sequences.offsets.push_back(0);
  for (int64_t b = 0; b < lengths.numel(); ++b) {
    if (len[b] == 0) continue;
    p.sequences.offsets.push_back(p.sequences.offsets.back() + len[b]);
    p.sequences.max_len = std::max(p.sequences.max_len, len[b]);
  }
  p.sequences.cu_seqlens = torch::tensor(p.sequences.offsets, torch::kLong).to(valid.device(), torch::kInt);
  p.input_ids = input_ids.reshape({-1}).index_select(0, p.index).unsqueeze(0);
  p.position_ids = position_ids.reshape({-1}).index_select(0, p.index).unsqueeze(0);
  return p;
}

PackedPairs packed_pairs(const PackedBatch& packed, int64_t seq_len) {
  const int64_t n = packed.index.size(0);
  if (n < 2) {
    auto none = torch::empty({0}, packed.index.options());
    return {none, none};
  }
  auto current = packed.index.narrow(0, 0, n - 1);
  auto next = packed.index.narrow(0, 1, n - 1);
  // Adjacent in the padded layout and not across a row boundary: the same pairs the padded path computes, also
  // when an attention mask has holes.
  auto same_sequence = next.eq(current + 1).logical_and(next.remainder(seq_len).ne(0));
  PackedPairs pairs;
  pairs.rows = same_sequence.nonzero().squeeze(1);
  pairs.targets = next.index_select(0, pairs.rows);
  return pairs;
}

torch::Tensor unpack_to_padded(const torch::Tensor& values, const torch::Tensor& at, int64_t batch, int64_t seq_len) {
  return torch::zeros({batch * seq_len}, values.options()).index_copy(0, at, values).view({batch, seq_len});
}

namespace {

// [L, heads, D] -> [1, H, L, D], expanding kv heads to H as transformers' repeat_kv does.
torch::Tensor to_bhld(const torch::Tensor& x, int64_t heads) {
  auto t = x.transpose(0, 1).unsqueeze(0);
  const int64_t kv = t.size(1);
  if (kv == heads) return t;
  const int64_t l = t.size(2), d = t.size(3);
  return t.unsqueeze(2).expand({1, kv, heads / kv, l, d}).reshape({1, heads, l, d});
}

// Which kernel packed attention runs on is a speed question users ask first: say it once per process.
void log_path_once(bool flash, const torch::Tensor& q) {
  static std::atomic<bool> said{false};
  if (said.exchange(true)) return;
  std::cerr << "enginery: packed attention (model.use_remove_padding) on " << q.device() << ", " << q.scalar_type()
            << ": " << (flash ? "aten varlen flash kernel"
                              : "one attention call per sequence (the varlen flash kernel needs a CUDA build of "
                                "LibTorch 2.1+, bf16/fp16, head_dim % 8 == 0 and <= 256, sm80+)")
            << "\n";
}

}  // namespace

torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const PackedSequences& seqs, double scale) {
  const bool flash = compat::varlen_flash_applies(q);
  log_path_once(flash, q);
  if (flash) {
    return compat::varlen_flash_attention(q, k, v, seqs.cu_seqlens, seqs.max_len, scale);
  }
  const int64_t heads = q.size(1);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(seqs.offsets.size());
  for (size_t i = 0; i + 1 < seqs.offsets.size(); ++i) {
    const int64_t begin = seqs.offsets[i], len = seqs.offsets[i + 1] - begin;
    auto out = compat::sdpa(to_bhld(q.narrow(0, begin, len), heads), to_bhld(k.narrow(0, begin, len), heads),
                            to_bhld(v.narrow(0, begin, len), heads), torch::Tensor(), /*is_causal=*/true, scale);
    outputs.push_back(out.squeeze(0).transpose(0, 1));
  }
  return torch::cat(outputs, 0);
}

}  // namespace models
}  // namespace enginery
