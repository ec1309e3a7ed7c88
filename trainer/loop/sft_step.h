#pragma once
// The SFT step: the step's examples collated into one padded batch, one train_batch over it (docs/ARCHITECTURE.md,
// "One step"), and its loss and token counts summed over the ranks.
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "host_api/loss.h"
#include "trainer/loop/training_step.h"
#include "config/train_config.h"

namespace enginery {

class SftStep final : public TrainingStep {
 public:
  // `required`: the per-token inputs `loss_fn` reads from every batch (trainer/loop/losses.h).
  SftStep(const TrainConfig& config, BaseEngine& engine, CommGroupPtr group, torch::Device device, int64_t rank,
          LossFn loss_fn, std::vector<std::string> required);

  StepRecord run(int64_t step, const std::vector<Example>& examples) override;
  std::string progress_line(const StepProgress& at, const StepRecord& record) const override;

 private:
  const TrainConfig& config_;
  BaseEngine& engine_;
  CommGroupPtr group_;
  torch::Device device_;
  int64_t rank_;
  LossFn loss_fn_;
  std::vector<std::string> required_;
};

}  // namespace enginery
