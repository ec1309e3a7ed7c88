#pragma once
// A batch of named tensors plus scalar metadata (the C++ counterpart of verl's TensorDict). docs/ARCHITECTURE.md,
// "The contract", batch layout.
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "host_api/config.h"

namespace enginery {

// [Note: packed batch] What an engine's forward_step receives: S sequences of N tokens in all, back to back, as
// verl's no-padding batch holds them.
//   cu_seqlens (int64 [S + 1]: 0, then each sequence's end), input_ids (int64 [N]), position_ids (int64 [N],
//   optional: 0, 1, ... in each sequence), loss_mask (per token [N]: 1 where that token is a target, never a
//   sequence's first token; or per sequence [S, R], verl's response mask: the loss reads it), and the loss inputs
//   (old_log_probs, ref_log_probs, advantages, returns, values), per token or per sequence likewise.
// A tensor whose dim 0 is N is per token, one whose dim 0 is S per sequence (where N == S every sequence is one
// token long and the two mean the same). The call's target tokens are loss_mask's ones (LossContext).
// Outputs are aligned as verl aligns them: log_probs[t] = log p(input_ids[t + 1] | tokens <= t of its sequence)
// and entropy[t] that distribution's, both 0 at a sequence's last token; values[t] at token t.
// A padded batch (input_ids and attention_mask [S, T], 1 = real token, any padding; loss_mask and loss inputs
// [S, T], position 0 never a target) is the host's form for its own data: the host's loop packs it before any
// engine sees it and hands its loss and its caller padded tensors with log_probs[s, t] for token t itself.
using MetaValue = ScalarValue;

class Batch {
 public:
  Batch() = default;

  void set(const std::string& name, torch::Tensor tensor);
  bool has(const std::string& name) const;
  const torch::Tensor& at(const std::string& name) const;  // throws EngineryError naming the missing key
  const std::map<std::string, torch::Tensor>& tensors() const { return tensors_; }

  void set_meta(const std::string& name, MetaValue value) { meta_[name] = std::move(value); }
  bool has_meta(const std::string& name) const { return meta_.count(name) != 0; }
  const MetaValue& meta(const std::string& name) const;
  const std::map<std::string, MetaValue>& all_meta() const { return meta_; }

  bool packed() const { return has("cu_seqlens"); }
  int64_t size() const;  // sequences (rows); 0 when empty

  // Sequences [begin, end) (views), or `rows` in that order (copied unless consecutive); metadata copied.
  Batch slice(int64_t begin, int64_t end) const;
  Batch select(const std::vector<int64_t>& rows) const;
  std::vector<Batch> split(int64_t rows_per_part) const;  // consecutive parts, the last may be smaller
  Batch to(const torch::Device& device) const;  // cu_seqlens stays where it is (engines read it on the host)

 private:
  std::map<std::string, torch::Tensor> tensors_;
  std::map<std::string, MetaValue> meta_;
};

// The batch's `temperature` metadata (verl's name): the language head divides the logits by it before the
// log-softmax (values are not affected). 1 when absent. Throws EngineryError naming the entry unless it is a
// finite number > 0. Engines that do not implement it never receive another value (capability 'temperature').
double batch_temperature(const Batch& batch);

}  // namespace enginery
