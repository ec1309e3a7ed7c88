#include "models/packed_sequences.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <iostream>

#include "host_api/error.h"
#include "support/torch_compat.h"

namespace enginery {
namespace models {

namespace {

torch::Tensor long_tensor(const std::vector<int64_t>& values, const torch::Device& device) {
  auto t = torch::empty({static_cast<int64_t>(values.size())}, torch::kLong);
  if (!values.empty()) std::copy(values.begin(), values.end(), t.data_ptr<int64_t>());
  return t.to(device);
}

void set_sequences(PackedSequences& seqs, const torch::Device& device) {
  seqs.cu_seqlens = torch::tensor(seqs.offsets, torch::kLong).to(device, torch::kInt);
}

}  // namespace

PackedBatch pack_batch(const torch::Tensor& valid, const torch::Tensor& input_ids, const torch::Tensor& position_ids) {
  PackedBatch p;
  p.rows = valid.size(0);
  p.seq_len = valid.size(1);
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
  set_sequences(p.sequences, valid.device());
  p.input_ids = input_ids.reshape({-1}).index_select(0, p.index).unsqueeze(0);
  p.position_ids = position_ids.reshape({-1}).index_select(0, p.index).unsqueeze(0);
  const int64_t n = p.index.size(0);
  if (n < 2) {
    p.pair_rows = torch::empty({0}, p.index.options());
  } else {
    auto current = p.index.narrow(0, 0, n - 1);
    auto next = p.index.narrow(0, 1, n - 1);
    // Adjacent in the padded layout and not across a row boundary: the pairs the padded path computes, also when an
    // attention mask has holes.
    p.pair_rows = next.eq(current + 1).logical_and(next.remainder(p.seq_len).ne(0)).nonzero().squeeze(1);
  }
  return p;
}

PackedBatch pack_sequences(const torch::Tensor& input_ids, const torch::Tensor& cu_seqlens,
                           const torch::Tensor& position_ids) {
  if (input_ids.dim() != 1) {
    throw EngineryError("a packed input must be [tokens], got " + std::to_string(input_ids.dim()) + " dimensions",
                        "input_ids");
  }
  const int64_t n = input_ids.size(0);
  if (cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 1 || cu_seqlens.is_floating_point()) {
    throw EngineryError("must be integers [sequences + 1], got shape " + std::to_string(cu_seqlens.dim()) +
                            "-d of " + std::to_string(cu_seqlens.numel()),
                        "cu_seqlens");
  }
  if (position_ids.defined() && (position_ids.dim() != 1 || position_ids.size(0) != n)) {
    throw EngineryError("must be [tokens] as input_ids (" + std::to_string(n) + " tokens)", "position_ids");
  }
  const auto host = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* cu = host.data_ptr<int64_t>();
  const int64_t s = host.numel() - 1;
  if (cu[0] != 0 || cu[s] != n) {
    throw EngineryError("must start at 0 and end at the number of tokens (" + std::to_string(n) + "), got " +
                            std::to_string(cu[0]) + " .. " + std::to_string(cu[s]),
                        "cu_seqlens");
  }
  PackedBatch p;
  p.rows = s;
  p.sequences.offsets.push_back(0);
  for (int64_t k = 0; k < s; ++k) {
    const int64_t len = cu[k + 1] - cu[k];
    if (len < 0) throw EngineryError("must not decrease (entry " + std::to_string(k + 1) + ")", "cu_seqlens");
    if (len > 0) p.sequences.offsets.push_back(cu[k + 1]);
    p.sequences.max_len = std::max(p.sequences.max_len, len);
  }
  p.seq_len = p.sequences.max_len;
  // The right-padded [S, longest] layout, the rows that have a next token, and positions 0, 1, ... per sequence.
  std::vector<int64_t> index, pairs, positions;
  index.reserve(n);
  pairs.reserve(n);
  if (!position_ids.defined()) positions.reserve(n);
  for (int64_t k = 0; k < s; ++k) {
    for (int64_t i = cu[k]; i < cu[k + 1]; ++i) {
      index.push_back(k * p.seq_len + (i - cu[k]));
      if (i + 1 < cu[k + 1]) pairs.push_back(i);
      if (!position_ids.defined()) positions.push_back(i - cu[k]);
    }
  }
  const auto device = input_ids.device();
  set_sequences(p.sequences, device);
  p.index = long_tensor(index, device);
  p.pair_rows = long_tensor(pairs, device);
  p.input_ids = input_ids.to(torch::kLong).unsqueeze(0);
  p.position_ids =
      (position_ids.defined() ? position_ids.to(device, torch::kLong) : long_tensor(positions, device)).unsqueeze(0);
  return p;
}

namespace {

std::vector<int64_t> with_leading(int64_t first, const torch::Tensor& t, int64_t skip) {
  std::vector<int64_t> shape{first};
  for (int64_t d = skip; d < t.dim(); ++d) shape.push_back(t.size(d));
  return shape;
}

}  // namespace

torch::Tensor to_padded(const torch::Tensor& values, const PackedBatch& packed) {
  auto flat = torch::zeros(with_leading(packed.rows * packed.seq_len, values, 1), values.options());
  auto shape = with_leading(packed.rows, values, 1);
  shape.insert(shape.begin() + 1, packed.seq_len);
  return flat.index_copy(0, packed.index, values).view(shape);
}

torch::Tensor from_padded(const torch::Tensor& padded, const PackedBatch& packed) {
  return padded.reshape(with_leading(packed.rows * packed.seq_len, padded, 2)).index_select(0, packed.index);
}

torch::Tensor next_token_to_padded(const torch::Tensor& values, const PackedBatch& packed) {
  const auto targets = packed.index.index_select(0, packed.pair_rows + 1);
  return torch::zeros({packed.rows * packed.seq_len}, values.options())
      .index_copy(0, targets, values.index_select(0, packed.pair_rows))
      .view({packed.rows, packed.seq_len});
}

torch::Tensor next_token_from_padded(const torch::Tensor& padded, const PackedBatch& packed) {
  const auto targets = packed.index.index_select(0, packed.pair_rows + 1);
  return torch::zeros({packed.tokens()}, padded.options())
      .index_copy(0, packed.pair_rows, padded.reshape({-1}).index_select(0, targets));
}

ModelOutput outputs_to_padded(ModelOutput out, const PackedBatch& packed) {
  if (out.values.defined()) out.values = to_padded(out.values, packed);
  if (out.log_probs.defined()) out.log_probs = next_token_to_padded(out.log_probs, packed);
  if (out.entropy.defined()) out.entropy = next_token_to_padded(out.entropy, packed);
  return out;
}

ModelOutput outputs_from_padded(ModelOutput out, const PackedBatch& packed) {
  if (out.values.defined()) out.values = from_padded(out.values, packed);
  if (out.log_probs.defined()) out.log_probs = next_token_from_padded(out.log_probs, packed);
  if (out.entropy.defined()) out.entropy = next_token_from_padded(out.entropy, packed);
  return out;
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
