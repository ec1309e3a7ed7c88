#pragma once
// Shared pieces of the veomni tests: engine arguments over builtin tiny models, a deterministic right-padded batch
// and the SFT loss of the loss.h contract.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "host_api/base_engine.h"
#include "engine_driver/precision.h"

namespace enginery {
namespace veomni_test {

inline EngineArgs make_args(const std::map<std::string, ScalarValue>& options, const std::string& param_dtype = "",
                            int rank = 0, int world_size = 1, c10::intrusive_ptr<compat::CommGroup> group = {}) {
  EngineArgs a;
  a.rank = rank;
  a.world_size = world_size;
  a.world_group = std::move(group);
  a.model.path = "builtin:qwen2-tiny";
  a.engine.strategy = "veomni";
  a.engine.backend_options = options;
  if (!param_dtype.empty()) a.engine.mixed_precision.param_dtype = PrecisionType::to_dtype(param_dtype);
  a.engine.micro_batch_size_per_gpu = 2;
  a.optim.lr = 1e-2;
  a.optim.clip_grad = 1.0;
  a.optim.total_training_steps = 20;
  return a;
}

inline Batch make_batch(int64_t rows, int64_t seq, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto ids = torch::randint(0, 256, {rows, seq}, gen, torch::kLong);
  auto lengths = torch::randint(seq / 2, seq + 1, {rows}, gen, torch::kLong);
  auto attention = (torch::arange(seq).unsqueeze(0) < lengths.unsqueeze(1)).to(torch::kLong);
  auto loss_mask = attention.clone();
  loss_mask.narrow(1, 0, 3).zero_();  // a three-token prompt
  Batch b;
  b.set("input_ids", ids);
  b.set("attention_mask", attention);
  b.set("loss_mask", loss_mask);
  return b;
}

inline LossResult sft_loss(const ModelOutput& out, const Batch& mb, const LossContext& ctx) {
  auto mask = mb.at("loss_mask").to(torch::kFloat);
  return {-(out.log_probs * mask).sum() / ctx.global_num_tokens, {}};
}

inline std::map<std::string, torch::Tensor> params_of(BaseEngine& engine) {
  std::map<std::string, torch::Tensor> out;
  engine.get_per_tensor_param([&](const std::string& name, const torch::Tensor& t) { out[name] = t.clone(); });
  return out;
}

// A key projection's bias has an exact gradient of zero (softmax is invariant to a score shift shared by every key):
// it gets rounding noise, which AdamW's 1/(sqrt(v) + eps) amplifies, so two summation orders (world sizes) move it
// apart by far more than any other parameter. Comparisons across world sizes hold it apart, to a bound of its own.
inline bool is_key_bias(const std::string& name) {
  static const std::string suffix = "k_proj.bias";
  return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

enum class Params { kAll, kKeyBiasOnly, kAllButKeyBias };

inline double max_diff(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b,
                       Params which = Params::kAll) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (const auto& [name, t] : a) {
    if (which != Params::kAll && is_key_bias(name) != (which == Params::kKeyBiasOnly)) continue;
    auto it = b.find(name);
    if (it == b.end()) {
      ADD_FAILURE() << "parameter " << name << " missing";
      continue;
    }
    worst = std::max(worst, (t.to(torch::kDouble) - it->second.to(torch::kDouble)).abs().max().item<double>());
  }
  return worst;
}

}  // namespace veomni_test
}  // namespace enginery
