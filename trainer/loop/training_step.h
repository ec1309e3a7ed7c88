#pragma once
// One step of a training algorithm, as the loop (trainer/loop/train_loop.cpp) drives and records it: the SFT step
// (trainer/loop/sft_step.h) and the GRPO step (trainer/grpo/grpo_step.h) implement it; the loop owns the metrics
// line, the summary, the progress cadence, tokens/s and the ETA, for both.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"

namespace enginery {

// What a step hands the loop; every rank gets the same values.
struct StepRecord {
  double loss = 0.0;       // what `enginery plot` and the summary follow (SFT: the step's loss; GRPO: actor/pg_loss)
  double grad_norm = 0.0;
  double lr = 0.0;
  double tokens = 0.0;     // real tokens of all ranks' sequences
  double seconds = 0.0;    // the step's wall time
  std::map<std::string, double> metrics;  // the rest of the step's metrics line
};

// Where the run stands when a progress line is printed.
struct StepProgress {
  int64_t step = 0;
  int64_t total = 0;
  double tokens_per_s = 0.0;
  double eta_s = 0.0;
};

class TrainingStep {
 public:
  virtual ~TrainingStep() = default;
  // Collective. `examples`: this rank's share of the step's data.train_batch_size rows.
  virtual StepRecord run(int64_t step, const std::vector<Example>& examples) = 0;
  // Rank 0's progress line (every trainer.log_freq steps).
  virtual std::string progress_line(const StepProgress& at, const StepRecord& record) const = 0;
};

}  // namespace enginery
