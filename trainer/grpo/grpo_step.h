#pragma once
// One GRPO step on every rank (docs/ARCHITECTURE.md, "One step", driven n times per step): refresh the rollout
// copy from the actor, sample rollout.n responses per prompt, score them, normalise within each group, old
// log-probs from the actor (infer_batch), reference log-probs, then ppo_epochs passes of mini-batch updates
// (train_batch); every log-prob at rollout.temperature, the distribution sampled from. The math lives in
// advantages / kl / grpo_loss / rollout_data; this file only orders the calls.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "trainer/data/dataset.h"
#include "trainer/grpo/grpo_loss.h"
#include "trainer/grpo/policy_copy.h"
#include "trainer/grpo/step_plan.h"
#include "trainer/loop/training_step.h"
#include "config/train_config.h"

namespace enginery {
namespace grpo {

// "loss" and "grad_norm" of its record repeat actor/pg_loss and actor/grad_norm for `enginery plot` and the summary.
class GrpoStep final : public TrainingStep {
 public:
  GrpoStep(const TrainConfig& config, BaseEngine& engine, CommGroupPtr group, torch::Device device, int64_t rank,
           int64_t world_size);

  // Collective. `examples`: this rank's prompts of the step. The record's metrics carry verl's names
  // (critic/score/mean, actor/pg_clipfrac, timing_s/gen, ...); every rank gets the same back.
  StepRecord run(int64_t step, const std::vector<Example>& examples) override;
  std::string progress_line(const StepProgress& at, const StepRecord& record) const override;

 private:
  struct Rollout {
    Batch batch;
    // Per row, float64 on the cpu: the reward, the group-normalised advantage, and the two lengths.
    torch::Tensor scores, advantages, response_lengths, prompt_lengths;
  };
  Rollout sample(int64_t step, const std::vector<Example>& examples, std::map<std::string, double>& timing);
  void add_log_probs(Rollout& rollout, std::map<std::string, double>& timing, std::vector<double>& sums);
  std::map<std::string, double> update(const Batch& batch, const std::string& at_step);
  std::map<std::string, double> reduce(const Rollout& rollout, std::vector<double> sums,
                                       std::map<std::string, double> update, const std::string& at_step);

  const TrainConfig& config_;
  BaseEngine& engine_;
  CommGroupPtr group_;
  torch::Device device_;
  int64_t rank_;
  int64_t world_size_;
  PolicyLossOptions loss_options_;
  LossFn loss_fn_;
  PolicyCopy rollout_;
  std::unique_ptr<PolicyCopy> reference_;  // only with actor.use_kl_loss
};

}  // namespace grpo
}  // namespace enginery
