// CausalLM under Ulysses sequence parallelism ([Note: Ulysses token and head split] in models/sequence_parallel.h;
// docs/ARCHITECTURE.md, "Sequence parallelism").
#include <algorithm>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/packed_sequences.h"
#include "models/sequence_parallel.h"

namespace enginery {
namespace models {
namespace {

std::string join(const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t v : values) out += (out.empty() ? "" : ", ") + std::to_string(v);
  return out;
}

}  // namespace

void DecoderModel::check_sequence_parallel(int64_t size, int64_t /*world*/, const std::string& key) const {
  if (size == 1) return;
  throw EngineryError("a " + hf_model_type() + " model built outside models::build_model has no Ulysses sequence " +
                          "parallelism (models/sequence_parallel.h)",
                      key, "1");
}

void CausalLM::check_sequence_parallel(int64_t size, int64_t world, const std::string& key) const {
  const int64_t heads = args_.num_attention_heads, kv_heads = args_.num_key_value_heads;
  const auto allowed = allowed_sequence_parallel_sizes(heads, kv_heads, world);
  if (std::find(allowed.begin(), allowed.end(), size) != allowed.end()) return;
  throw EngineryError(std::to_string(size) + " must divide the world size (" + std::to_string(world) + ") and the " +
                          args_.model_type + " model's " + std::to_string(heads) +
                          " attention heads, and divide or be a multiple of its " + std::to_string(kv_heads) +
                          " key/value heads",
                      key, join(allowed));
}

ModelOutput CausalLM::ulysses_forward(const PackedBatch& packed, const HeadOptions& head, UnitHooks* hooks,
                                      const SequenceParallelGroup& group) {
  const int64_t n = packed.tokens();
  const auto& ids = packed.input_ids[0];
  const SequenceSlice slice = sequence_slice(n, group);
  // The padding tokens (id 0, positions 0, 1, ...) are a sequence of their own (with_padding_sequence).
  auto all_ids = torch::cat({ids, torch::zeros({slice.padded - n}, ids.options())});
  auto all_positions =
      torch::cat({packed.position_ids[0], torch::arange(slice.padded - n, packed.position_ids.options())});
  AttentionContext ctx;
  ctx.packed = with_padding_sequence(packed.sequences, slice.padded, ids.device());
  ctx.sequence_parallel = &group;
  auto h = body_forward(all_ids.narrow(0, slice.begin, slice.length).unsqueeze(0),
                        all_positions.narrow(0, slice.begin, slice.length).unsqueeze(0), std::move(ctx), hooks)[0];
  if (head_ == HeadKind::kValue) {
    return value_head(gather_sequence(group, score_(h).squeeze(-1).to(torch::kFloat)).narrow(0, 0, n), hooks);
  }
  // Every row of the slice predicts the next packed token; only the pairs the unsplit packed path computes
  // (pair_rows) reach the outputs, the others (a sequence's last token, padding) get no gradient.
  auto targets = all_ids.roll(-1).narrow(0, slice.begin, slice.length);
  return language_head(h, targets, head, hooks, [&](const torch::Tensor& values) {
    auto rows = gather_sequence(group, values).narrow(0, 0, n).index_select(0, packed.pair_rows);
    return torch::zeros({n}, values.options()).index_copy(0, packed.pair_rows, rows);
  });
}

}  // namespace models
}  // namespace enginery
