#pragma once
// Evaluation on held-out data. Collective: every rank calls it with the same arguments (the engine's forward
// all-gathers parameters), each evaluates its share, the counts are all-reduced.
#include <cstdint>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "trainer/data/addition_task.h"
#include "trainer/data/dataset.h"

namespace enginery {

// A sequence whose scored log-probs are not all finite (NaN or inf: a broken model or plugin) is a failure, never a
// match: it counts as wrong, makes val_loss NaN and is counted in `nonfinite` (docs/ARCHITECTURE.md, "Evaluation").
struct EvalResult {
  int64_t correct = 0;
  int64_t total = 0;       // sequences evaluated, all ranks
  int64_t nonfinite = 0;   // of them, those with a non-finite log-prob at a scored position
  double accuracy = 0.0;   // correct / total (addition task only)
  double val_loss = 0.0;   // token-mean negative log-likelihood of the targets; NaN when nonfinite > 0
  bool has_accuracy = false;
  std::vector<std::string> samples;  // a few rendered predictions from rank 0's share
};

// "12 of 12 held-out sequences gave non-finite log-probs (NaN or inf): counted wrong, val_loss nan"; empty when
// every sequence was finite.
std::string nonfinite_note(const EvalResult& result);

struct EvalContext {
  BaseEngine* engine = nullptr;
  CommGroupPtr group;
  torch::Device device = torch::kCPU;
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t rows_per_call = 64;  // rows per infer_batch call; every rank passes exactly this many
};

// Greedy exact match of the addition task by teacher forcing: greedy decoding reproduces the answer iff, at every
// answer position, the target is the most likely next token given the true prefix. The model gives log-probs of
// the tokens it is shown, so a position whose target has p > 1/2 is decided at once; the others are re-run with
// each of the task's tokens in that position. A non-task token can only win where the task tokens together hold
// less than 1 - p(target); such a position is counted wrong (conservative, and vanishing once the model trains).
EvalResult evaluate_addition(const EvalContext& ctx, const AdditionTask& task, int64_t val_size);

// Token-mean loss of a held-out dataset (for .jsonl / .bin validation files).
EvalResult evaluate_loss(const EvalContext& ctx, const Dataset& val);

}  // namespace enginery
