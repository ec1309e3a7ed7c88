#include "models/sequence_scores.h"

#include <algorithm>
#include <numeric>

#include "support/torch_compat.h"

namespace enginery {
namespace models {

SequenceScores score_sequences(DecoderModel& model, const std::vector<std::vector<int64_t>>& tokens,
                               const ScoreOptions& options) {
  const size_t n = tokens.size();
  SequenceScores out;
  out.log_probs.resize(n);
  out.entropy.resize(n);
  // Longest first, so each batch pads little and the first batch shows the peak memory.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tokens[a].size() > tokens[b].size(); });
  torch::NoGradGuard no_grad;
  compat::AutocastScope autocast(options.device.type(), options.compute_dtype);
  size_t begin = 0;
  while (begin < n && tokens[order[begin]].size() >= 2) {
    const int64_t t = static_cast<int64_t>(tokens[order[begin]].size());
    size_t end = begin + 1;
    while (end < n && tokens[order[end]].size() >= 2 &&
           static_cast<int64_t>(end - begin + 1) * t <= std::max<int64_t>(options.max_batch_tokens, t)) {
      ++end;
    }
    const int64_t b = static_cast<int64_t>(end - begin);
    auto ids = torch::zeros({b, t}, torch::kLong);
    auto mask = torch::zeros({b, t}, torch::kLong);
    for (int64_t i = 0; i < b; ++i) {
      const auto& seq = tokens[order[begin + i]];
      const int64_t len = static_cast<int64_t>(seq.size());
      std::copy(seq.begin(), seq.end(), ids[i].data_ptr<int64_t>());  // right padding
      mask[i].narrow(0, 0, len).fill_(1);
    }
    ModelInputs in{ids.to(options.device), mask.to(options.device), torch::Tensor()};
    HeadOptions head;
    head.compute_entropy = true;
    auto result = model.forward(in, head, nullptr);
    auto lp = result.log_probs.to(torch::kCPU, torch::kDouble);
    auto ent = result.entropy.to(torch::kCPU, torch::kDouble);
    for (int64_t i = 0; i < b; ++i) {
      const size_t idx = order[begin + i];
      const int64_t len = static_cast<int64_t>(tokens[idx].size());
      // Model outputs are aligned with input_ids (position 0 is 0): shift to the t = 0 .. len-2 layout.
      auto row_lp = lp[i].narrow(0, 1, len - 1).contiguous();
      auto row_ent = ent[i].narrow(0, 1, len - 1).contiguous();
      out.log_probs[idx].assign(row_lp.data_ptr<double>(), row_lp.data_ptr<double>() + len - 1);
      out.entropy[idx].assign(row_ent.data_ptr<double>(), row_ent.data_ptr<double>() + len - 1);
    }
    begin = end;
  }
  return out;
}

}  // namespace models
}  // namespace enginery
