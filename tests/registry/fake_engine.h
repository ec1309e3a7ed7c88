#pragma once
// A do-nothing engine for registry tests and test plugins only: it remembers the args it was built with and
// reports them back, so a test can see which factory built it and what it was given.
#include <atomic>

#include "host_api/base_engine.h"

namespace enginery::test {

class FakeEngine : public BaseEngine {
 public:
  FakeEngine(EngineArgs args, int plugin_id, std::atomic<int>* live = nullptr)
      : args_(std::move(args)), plugin_id_(plugin_id), live_(live) {
    if (live_) ++*live_;
  }
  ~FakeEngine() override {
    if (live_) --*live_;
  }

  int plugin_id() const { return plugin_id_; }
  const EngineArgs& args() const override { return args_; }
  torch::Device device() const override { return torch::kCPU; }

  void initialize() override {}
  void optimizer_zero_grad() override {}
  torch::Tensor optimizer_step() override { return torch::zeros({}); }
  // Reports which plugin built the engine, so tests can tell engines apart through the base class.
  double lr_scheduler_step() override { return plugin_id_; }
  void get_per_tensor_param(const std::function<void(const std::string&, const torch::Tensor&)>&) override {}
  void save_checkpoint(const std::string&, int64_t, int64_t) override {}
  void load_checkpoint(const std::string&) override {}
  int64_t get_data_parallel_rank() const override { return args_.rank; }
  int64_t get_data_parallel_size() const override { return args_.world_size; }
  CommGroupPtr get_data_parallel_group() const override { return args_.world_group; }

 protected:
  MicroBatchResult forward_step(const Batch&, const LossFn&, const LossContext&, bool) override { return {}; }

 private:
  EngineArgs args_;
  int plugin_id_;
  std::atomic<int>* live_;
};

}  // namespace enginery::test
