#include "engine_driver/micro_batch_plan.h"

#include <algorithm>
#include <numeric>

#include "host_api/error.h"

namespace enginery {
namespace {

// Row indices sorted by valid tokens, longest first (ties by index, so every rank plans deterministically).
std::vector<int64_t> longest_first(const std::vector<int64_t>& tokens) {
  std::vector<int64_t> order(tokens.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return tokens[a] > tokens[b]; });
  return order;
}

std::vector<std::vector<int64_t>> first_fit_decreasing(const std::vector<int64_t>& tokens, int64_t budget) {
  std::vector<std::vector<int64_t>> bins;
  std::vector<int64_t> load;
  for (int64_t row : longest_first(tokens)) {
    size_t b = 0;
    while (b < bins.size() && load[b] + tokens[row] > budget) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      load.push_back(0);
    }
    bins[b].push_back(row);
    load[b] += tokens[row];
  }
  return bins;
}

// Longest row first onto the lightest of `count` micro-batches; empty when a micro-batch would exceed the budget
// with more than one row in it.
std::vector<std::vector<int64_t>> spread(const std::vector<int64_t>& tokens, int64_t budget, int64_t count) {
  std::vector<std::vector<int64_t>> bins(static_cast<size_t>(count));
  std::vector<int64_t> load(static_cast<size_t>(count), 0);
  for (int64_t row : longest_first(tokens)) {
    const size_t b = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    bins[b].push_back(row);
    load[b] += tokens[row];
    if (load[b] > budget && bins[b].size() > 1) return {};
  }
  return bins;
}

}  // namespace

MicroBatchPlan plan_by_rows(int64_t rows, int64_t rows_per_micro_batch) {
  MicroBatchPlan plan;
  for (int64_t begin = 0; begin < rows; begin += rows_per_micro_batch) {
    plan.rows.emplace_back();
    for (int64_t r = begin; r < std::min(rows, begin + rows_per_micro_batch); ++r) plan.rows.back().push_back(r);
  }
  return plan;
}

int64_t min_micro_batches(const std::vector<int64_t>& valid_tokens, int64_t budget) {
  return static_cast<int64_t>(first_fit_decreasing(valid_tokens, budget).size());
}

MicroBatchPlan plan_by_tokens(const std::vector<int64_t>& valid_tokens, int64_t budget, int64_t count) {
  if (budget <= 0) {
    throw EngineryError("must be positive, got " + std::to_string(budget), "engine.max_token_len_per_gpu", ">= 1");
  }
  MicroBatchPlan plan;
  plan.oversize = std::any_of(valid_tokens.begin(), valid_tokens.end(), [&](int64_t t) { return t > budget; });
  plan.rows = spread(valid_tokens, budget, count);
  if (plan.rows.empty()) plan.rows = first_fit_decreasing(valid_tokens, budget);
  // Fillers where this rank has fewer rows (or fewer micro-batches that fit) than the agreed count.
  plan.rows.erase(std::remove_if(plan.rows.begin(), plan.rows.end(), [](const auto& r) { return r.empty(); }),
                  plan.rows.end());
  while (static_cast<int64_t>(plan.rows.size()) < count) plan.rows.emplace_back();
  for (auto& rows : plan.rows) std::sort(rows.begin(), rows.end());
  return plan;
}

std::vector<int64_t> valid_tokens_per_row(const Batch& batch) {
  const int64_t rows = batch.size();
  std::vector<int64_t> tokens(static_cast<size_t>(rows));
  if (batch.packed()) {
    const auto ends = batch.at("cu_seqlens").to(torch::kCPU).to(torch::kLong).contiguous();
    const int64_t* e = ends.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) tokens[static_cast<size_t>(r)] = e[r + 1] - e[r];
    return tokens;
  }
  if (!batch.has("attention_mask")) {
    const int64_t length = batch.at("input_ids").size(1);
    std::fill(tokens.begin(), tokens.end(), length);
    return tokens;
  }
  const auto sums = batch.at("attention_mask").to(torch::kCPU).to(torch::kLong).sum(1).contiguous();
  std::copy(sums.data_ptr<int64_t>(), sums.data_ptr<int64_t>() + rows, tokens.begin());
  return tokens;
}

}  // namespace enginery
