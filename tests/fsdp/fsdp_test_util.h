#pragma once
// Shared pieces of the FSDP tests: engine arguments, deterministic batches, the SFT and value losses (the loss.h
// contract), and an unsharded reference trainer (plain model, torch::optim::AdamW, clip_grad_norm_) that every
// sharded run is compared against.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "engine_driver/precision.h"
#include "plugin/fsdp/fsdp_engine.h"
#include "tests/fsdp/tiny_decoder.h"

namespace enginery {
namespace fsdp_test {

inline EngineArgs make_args(const std::string& strategy, const std::string& param_dtype, int rank = 0,
                            int world_size = 1, c10::intrusive_ptr<compat::CommGroup> group = {},
                            c10::intrusive_ptr<c10d::Store> store = {}) {
  EngineArgs a;
  a.rank = rank;
  a.world_size = world_size;
  a.world_group = std::move(group);
  a.store = std::move(store);
  a.engine.strategy = strategy;
  a.engine.mixed_precision.param_dtype = PrecisionType::to_dtype(param_dtype);
  a.engine.micro_batch_size_per_gpu = 2;
  a.optim.lr = 1e-2;
  a.optim.weight_decay = 0.01;
  a.optim.clip_grad = 0.5;  // small enough that clipping is active in the tests
  a.optim.total_training_steps = 10;
  return a;
}

inline fsdp::ModelBuilder tiny_builder(TinyConfig c, std::shared_ptr<TinyDecoder>* keep = nullptr) {
  return [c, keep](const EngineArgs&) {
    auto m = std::make_shared<TinyDecoder>(c);
    if (keep) *keep = m;
    return m;
  };
}

// A global batch of `rows` sequences of length `seq` with right padding and prompt tokens outside the loss.
inline Batch make_batch(int64_t rows, int64_t seq, int64_t vocab, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto ids = torch::randint(0, vocab, {rows, seq}, gen, torch::kLong);
  auto lengths = torch::randint(seq / 2, seq + 1, {rows}, gen, torch::kLong);
  auto pos = torch::arange(seq).unsqueeze(0);
  auto attention = (pos < lengths.unsqueeze(1)).to(torch::kLong);
  auto loss_mask = attention.clone();
  loss_mask.narrow(1, 0, 2).zero_();  // a two-token prompt
  Batch b;
  b.set("input_ids", ids);
  b.set("attention_mask", attention);
  b.set("loss_mask", loss_mask);
  b.set("returns", torch::randn({rows, seq}, gen));
  return b;
}

inline Batch rank_slice(const Batch& global, int rank, int world) {
  const int64_t per = global.size() / world;
  return global.slice(rank * per, (rank + 1) * per);
}

// Sum over this micro-batch's target tokens / global token count (loss.h).
inline LossResult sft_loss(const ModelOutput& out, const Batch& mb, const LossContext& ctx) {
  auto mask = mb.at("loss_mask").to(torch::kFloat);
  auto loss = -(out.log_probs * mask).sum() / ctx.global_num_tokens;
  return {loss, {{"tokens", mask.sum()}}};
}

inline LossResult value_loss(const ModelOutput& out, const Batch& mb, const LossContext& ctx) {
  auto mask = mb.at("loss_mask").to(torch::kFloat);
  auto err = (out.values - mb.at("returns")).pow(2);
  return {(err * mask).sum() / ctx.global_num_tokens, {}};
}

inline double target_tokens(const Batch& b) {
  const auto& m = b.at("loss_mask");
  return m.narrow(1, 1, m.size(1) - 1).sum().item<double>();
}

// Unsharded fp32 reference: same seed and model as the engine, torch::optim::AdamW, clip_grad_norm_.
class Reference {
 public:
  Reference(const TinyConfig& c, const EngineArgs& args)
      : Reference(args, [&] {
          torch::manual_seed(static_cast<uint64_t>(args.engine.seed));
          return std::make_shared<TinyDecoder>(c);
        }()) {}
  Reference(const EngineArgs& args, std::shared_ptr<models::DecoderModel> model) : args_(args), model_(std::move(model)) {
    torch::optim::AdamWOptions o(args.optim.lr);
    o.betas({args.optim.betas[0], args.optim.betas[1]}).eps(args.optim.eps).weight_decay(args.optim.weight_decay);
    opt_ = std::make_unique<torch::optim::AdamW>(model_->parameters(), o);
  }

  // Accumulates the gradient of one forward_backward_batch call over the whole global batch.
  void accumulate(const Batch& global, const LossFn& loss_fn) {
    LossContext ctx;
    ctx.global_num_tokens = target_tokens(global);
    models::ModelInputs in{global.at("input_ids"), global.at("attention_mask"), {}};
    auto out = model_->forward(in, {}, nullptr);
    loss_fn(out, global, ctx).loss.backward();
  }

  // Returns the grad norm before clipping, then steps.
  double step() {
    const double norm = torch::nn::utils::clip_grad_norm_(model_->parameters(), args_.optim.clip_grad);
    opt_->step();
    opt_->zero_grad();
    return norm;
  }

  std::shared_ptr<models::DecoderModel> model() const { return model_; }

 private:
  EngineArgs args_;
  std::shared_ptr<models::DecoderModel> model_;
  std::unique_ptr<torch::optim::AdamW> opt_;
};

// An engine that computes nothing: every step is a no-op, on device() (CPU unless a test says otherwise). For tests
// of what BaseEngine itself does around an engine (to(), the mode guards).
class StubEngine : public BaseEngine {
 public:
  explicit StubEngine(const std::string& strategy, torch::Device device = torch::kCPU) : device_(device) {
    args_.engine.strategy = strategy;
  }
  void initialize() override {}
  void optimizer_zero_grad() override {}
  torch::Tensor optimizer_step() override { return torch::zeros({}); }
  double lr_scheduler_step() override { return 0.0; }
  void get_per_tensor_param(const std::function<void(const std::string&, const torch::Tensor&)>&) override {}
  void save_checkpoint(const std::string&, int64_t, int64_t) override {}
  void load_checkpoint(const std::string&) override {}
  int64_t get_data_parallel_rank() const override { return 0; }
  int64_t get_data_parallel_size() const override { return 1; }
  CommGroupPtr get_data_parallel_group() const override { return {}; }
  torch::Device device() const override { return device_; }
  const EngineArgs& args() const override { return args_; }

 protected:
  MicroBatchResult forward_step(const Batch&, const LossFn&, const LossContext&, bool) override { return {}; }
  EngineArgs args_;

 private:
  torch::Device device_;
};

inline std::map<std::string, torch::Tensor> engine_params(BaseEngine& engine) {
  std::map<std::string, torch::Tensor> out;
  engine.get_per_tensor_param([&](const std::string& name, const torch::Tensor& t) { out[name] = t.clone(); });
  return out;
}

inline void expect_params_near(const std::map<std::string, torch::Tensor>& got, torch::nn::Module& reference,
                               double atol, const std::string& what) {
  size_t seen = 0;
  for (const auto& item : reference.named_parameters()) {
    auto it = got.find(item.key());
    ASSERT_NE(it, got.end()) << what << ": engine reports no parameter " << item.key();
    const double diff = (it->second.to(torch::kDouble) - item.value().to(torch::kDouble)).abs().max().item<double>();
    EXPECT_LE(diff, atol) << what << ": " << item.key() << " differs from the unsharded reference by " << diff;
    ++seen;
  }
  EXPECT_EQ(seen, got.size()) << what << ": engine reports parameters the reference lacks";
}

}  // namespace fsdp_test
}  // namespace enginery
