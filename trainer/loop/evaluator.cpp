#include "trainer/loop/evaluator.h"

#include <cmath>

#include "host_api/error.h"
#include "trainer/collectives.h"
#include "trainer/loop/losses.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace {

// A two-token row that keeps every infer_batch call the same size on every rank.
Example filler_row() { return Example{{AdditionTask::kBos, AdditionTask::kBos}, {0.0f, 1.0f}, {}}; }

// Log-probs of every row (cpu float, each as long as its row). Calls infer_batch with exactly rows_per_call rows
// per call and the same number of calls on every rank, so sharded engines stay in step.
std::vector<torch::Tensor> infer_rows(const EvalContext& ctx, const std::vector<Example>& rows) {
  const int64_t per_call = ctx.rows_per_call;
  const int64_t n = static_cast<int64_t>(rows.size());
  const double local_calls = static_cast<double>((n + per_call - 1) / per_call);
  const int64_t calls = static_cast<int64_t>(all_reduce(ctx.group, {local_calls}, c10d::ReduceOp::MAX, ctx.device,
                                                        "evaluation: all-reduce of the call count")[0]);
  std::vector<torch::Tensor> result;
  result.reserve(rows.size());
  for (int64_t call = 0; call < calls; ++call) {
    std::vector<Example> chunk;
    for (int64_t i = call * per_call; i < std::min(n, (call + 1) * per_call); ++i) chunk.push_back(rows[i]);
    const int64_t real = static_cast<int64_t>(chunk.size());
    while (static_cast<int64_t>(chunk.size()) < per_call) chunk.push_back(filler_row());
    const Batch batch = collate(chunk).to(ctx.device);
    BatchOutput out = guard_collective("evaluation: engine infer_batch", ctx.rank,
                                       [&] { return infer_batch(*ctx.engine, batch, sft_loss); });
    auto it = out.outputs.find("log_probs");
    if (it == out.outputs.end() || !it->second.defined()) {
      throw EngineryError("the engine returned no log_probs from infer_batch", "evaluation");
    }
    const torch::Tensor log_probs = it->second.detach().to(torch::kCPU, torch::kFloat);
    if (log_probs.size(0) != per_call) {
      throw EngineryError("infer_batch returned " + std::to_string(log_probs.size(0)) + " rows of log_probs for " +
                              std::to_string(per_call),
                          "evaluation");
    }
    for (int64_t i = 0; i < real; ++i) {
      result.push_back(log_probs[i].slice(0, 0, static_cast<int64_t>(chunk[i].input_ids.size())).clone());
    }
  }
  return result;
}

struct Position {
  int64_t example;
  int64_t t;
};

}  // namespace

std::string nonfinite_note(const EvalResult& r) {
  if (r.nonfinite == 0) return "";
  return std::to_string(r.nonfinite) + " of " + std::to_string(r.total) +
         " held-out sequences gave non-finite log-probs (NaN or inf): counted wrong, val_loss nan";
}

EvalResult evaluate_addition(const EvalContext& ctx, const AdditionTask& task, int64_t val_size) {
  std::vector<Example> examples;
  for (int64_t i = ctx.rank; i < val_size; i += ctx.world_size) {
    auto [a, b] = task.val_pair(i);
    examples.push_back(Example{task.tokens(a, b), task.loss_mask(), {}});
  }
  const int64_t begin = task.answer_begin();
  const int64_t end = task.seq_len();

  // Pass 1: the true sequences. A target with p > 1/2 is the argmax. A non-finite log-prob fails its sequence
  // (a NaN compares false with every threshold: unchecked, it would read as decided, and as a match).
  const std::vector<torch::Tensor> first = infer_rows(ctx, examples);
  double nll = 0.0, tokens = 0.0;
  std::vector<std::vector<int64_t>> predicted(examples.size());
  std::vector<bool> correct(examples.size(), true), nonfinite(examples.size(), false);
  std::vector<Position> open;
  for (size_t k = 0; k < examples.size(); ++k) {
    predicted[k] = examples[k].input_ids;
    for (int64_t t = begin; t < end; ++t) {
      const double lp = first[k][t].item<double>();
      nll -= lp;
      tokens += 1.0;
      if (!std::isfinite(lp)) {
        nonfinite[k] = true;
      } else if (lp <= std::log(0.5)) {
        open.push_back({static_cast<int64_t>(k), t});
      }
    }
  }

  // Pass 2: every undecided position with each task token in its place.
  const int64_t vocab = AdditionTask::kVocabSize;
  std::vector<Example> candidates;
  for (const Position& p : open) {
    const auto& ids = examples[p.example].input_ids;
    for (int64_t v = 0; v < vocab; ++v) {
      Example row;
      row.input_ids.assign(ids.begin(), ids.begin() + p.t + 1);
      row.input_ids[p.t] = v;
      row.loss_mask.assign(p.t + 1, 0.0f);
      row.loss_mask[p.t] = 1.0f;
      candidates.push_back(std::move(row));
    }
  }
  const std::vector<torch::Tensor> second = infer_rows(ctx, candidates);
  for (size_t j = 0; j < open.size(); ++j) {
    const Position& p = open[j];
    const int64_t target = examples[p.example].input_ids[p.t];
    double best_p = -1.0, mass = 0.0, target_p = 0.0;
    int64_t best = -1;
    for (int64_t v = 0; v < vocab; ++v) {
      const double lp = second[j * vocab + v][p.t].item<double>();
      if (!std::isfinite(lp)) nonfinite[p.example] = true;
      const double prob = std::exp(lp);
      mass += prob;
      if (v == target) target_p = prob;
      if (prob > best_p) best_p = prob, best = v;
    }
    predicted[p.example][p.t] = best;
    const bool wins = target_p >= best_p && target_p >= 1.0 - mass;
    if (!wins) correct[p.example] = false;
  }

  int64_t local_correct = 0, local_nonfinite = 0;
  for (size_t k = 0; k < examples.size(); ++k) {
    if (nonfinite[k]) correct[k] = false;
    local_correct += correct[k] ? 1 : 0;
    local_nonfinite += nonfinite[k] ? 1 : 0;
  }
  EvalResult result;
  for (size_t k = 0; k < examples.size() && k < 3 && ctx.rank == 0; ++k) {
    std::string line = task.render(predicted[k]) +
                       (nonfinite[k] ? "  failed: non-finite log-probs"
                        : correct[k] ? "  ok"
                                     : "  wrong, expected " + task.render(examples[k].input_ids));
    result.samples.push_back(line);
  }
  const auto sums = all_reduce(ctx.group, {static_cast<double>(local_correct), static_cast<double>(examples.size()),
                                           nll, tokens, static_cast<double>(local_nonfinite)},
                               c10d::ReduceOp::SUM, ctx.device, "evaluation: all-reduce of the exact-match counts");
  result.correct = static_cast<int64_t>(sums[0]);
  result.total = static_cast<int64_t>(sums[1]);
  result.nonfinite = static_cast<int64_t>(sums[4]);
  result.accuracy = result.total > 0 ? sums[0] / sums[1] : 0.0;
  result.val_loss = result.nonfinite > 0 ? NAN : sums[3] > 0 ? sums[2] / sums[3] : 0.0;
  result.has_accuracy = true;
  return result;
}

EvalResult evaluate_loss(const EvalContext& ctx, const Dataset& val) {
  std::vector<Example> rows;
  for (int64_t i = ctx.rank; i < val.size(); i += ctx.world_size) rows.push_back(val.get(i));
  const std::vector<torch::Tensor> log_probs = infer_rows(ctx, rows);
  double nll = 0.0, tokens = 0.0, nonfinite = 0.0;
  for (size_t k = 0; k < rows.size(); ++k) {
    bool finite = true;
    for (size_t t = 1; t < rows[k].input_ids.size(); ++t) {
      if (rows[k].loss_mask[t] == 0.0f) continue;
      const double lp = log_probs[k][static_cast<int64_t>(t)].item<double>();
      finite = finite && std::isfinite(lp);
      nll -= lp * rows[k].loss_mask[t];
      tokens += rows[k].loss_mask[t];
    }
    nonfinite += finite ? 0.0 : 1.0;
  }
  const auto sums = all_reduce(ctx.group, {nll, tokens, static_cast<double>(rows.size()), nonfinite},
                               c10d::ReduceOp::SUM, ctx.device, "evaluation: all-reduce of the validation loss");
  EvalResult result;
  result.total = static_cast<int64_t>(sums[2]);
  result.nonfinite = static_cast<int64_t>(sums[3]);
  result.val_loss = result.nonfinite > 0 ? NAN : sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  return result;
}

}  // namespace enginery
