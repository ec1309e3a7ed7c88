#pragma once
// DdpEngine: a replicated data-parallel engine written against the public headers only (host_api/ and models/),
// the way a third party writes one. Every rank holds the whole model in fp32; each step sums the gradients over
// the ranks with one all-reduce, clips them and runs torch::optim::AdamW. No sharding, no grad scaler.
#include <host_api/base_engine.h>
#include <host_api/config_support.h>
#include <models/decoder_model.h>
#include <torch/torch.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace example {

constexpr const char* kBackend = "ddp";

class DdpEngine : public enginery::BaseEngine {
 public:
  // Checks every setting it reads (EngineryError naming the field); builds nothing yet.
  explicit DdpEngine(enginery::EngineArgs args);
  // What it honours beyond the defaults: fp32/bf16 compute (as this LibTorch's CPU autocast allows), no scaler.
  // The host refuses every other setting by name before this engine is built.
  static enginery::ConfigSupport config_support();

  void initialize() override;

  void optimizer_zero_grad() override;
  torch::Tensor optimizer_step() override;
  double lr_scheduler_step() override;

  void get_per_tensor_param(
      const std::function<void(const std::string& name, const torch::Tensor& full)>& visit) override;
  void save_checkpoint(const std::string& path, int64_t global_step, int64_t max_ckpt_to_keep) override;
  void load_checkpoint(const std::string& path) override;

  int64_t get_data_parallel_rank() const override { return args_.rank; }
  int64_t get_data_parallel_size() const override { return args_.world_size; }
  enginery::CommGroupPtr get_data_parallel_group() const override { return args_.world_group; }
  torch::Device device() const override { return device_; }
  const enginery::EngineArgs& args() const override { return args_; }

 protected:
  // One micro-batch of the host's loop (forward_backward_batch, engine_driver/step_loop.h).
  enginery::MicroBatchResult forward_step(const enginery::Batch& micro_batch, const enginery::LossFn& loss_fn,
                                          const enginery::LossContext& ctx, bool forward_only) override;
  void set_training(bool training) override;

 private:
  std::string where(const std::string& field) const;
  void require_initialized(const char* method) const;
  void all_reduce(torch::Tensor& tensor) const;  // SUM over the world; a no-op on one rank
  void barrier() const;
  double lr_at(int64_t step) const;  // verl's constant / cosine schedules with linear warmup
  std::string checkpoint_file(const std::string& dir) const { return dir + "/ddp_state.pt"; }

  enginery::EngineArgs args_;
  torch::Device device_;
  std::shared_ptr<enginery::models::DecoderModel> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  int64_t scheduler_step_ = 0;
  int64_t warmup_steps_ = 0;
  std::deque<std::string> saved_checkpoints_;
};

}  // namespace example
