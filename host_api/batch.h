#pragma once
// A batch of named tensors that share dim 0, plus scalar metadata (the C++ counterpart of verl's TensorDict).
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace enginery {

// Conventional tensor names (all [batch, seq] unless noted):
//   input_ids (int64; int32 accepted, engines get int64), attention_mask (1 = real token), position_ids (int64 or
//   int32, optional: derived from the mask),
//   loss_mask (1 where the token at that position is a training target; position 0 can never be one),
//   old_log_probs, advantages (PPO), returns, values (value loss).
// Everything the model emits is aligned the same way: log_probs[b, t] = log p(input_ids[b, t] | input_ids[b, <t]),
// with log_probs[b, 0] = 0.
using MetaValue = std::variant<bool, int64_t, double, std::string>;

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

  int64_t size() const;  // dim 0 shared by all tensors; 0 when empty

  Batch slice(int64_t begin, int64_t end) const;                     // rows [begin, end), metadata copied
  std::vector<Batch> split(int64_t rows_per_part) const;             // consecutive parts, the last may be smaller
  Batch to(const torch::Device& device) const;

 private:
  std::map<std::string, torch::Tensor> tensors_;
  std::map<std::string, MetaValue> meta_;
};

// The batch's `temperature` metadata (verl's name): the language head divides the logits by it before the
// log-softmax, so log-probs and entropy are those of the sampling distribution at that temperature (values are not
// affected). 1 when absent. Throws EngineryError naming the entry unless it is a finite number > 0. Engines that
// do not implement it must refuse a value other than 1 (docs/ARCHITECTURE.md, "One step").
double batch_temperature(const Batch& batch);

}  // namespace enginery
