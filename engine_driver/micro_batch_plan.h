#pragma once
// How the host's loop (forward_backward_batch, engine_driver/step_loop.h) cuts a rank's batch into micro-batches
// (docs/ARCHITECTURE.md, "One step"): what an engine's forward_step receives. Fixed: consecutive groups of
// engine.micro_batch_size_per_gpu rows. Dynamic (engine.use_dynamic_bsz): groups of rows holding at most
// engine.max_token_len_per_gpu valid tokens each, balanced, in as many micro-batches as the rank with the most needs.
#include <cstdint>
#include <vector>

#include "host_api/batch.h"

namespace enginery {

struct MicroBatchPlan {
  // Row indices of the batch for each micro-batch, in run order; rows keep their batch order within one. An empty
  // entry is a filler: the rank runs a zero-loss micro-batch so that its collectives match the other ranks'.
  std::vector<std::vector<int64_t>> rows;
  bool oversize = false;  // some row alone holds more valid tokens than the budget
};

// Consecutive groups of `rows_per_micro_batch` rows (the last may be smaller).
MicroBatchPlan plan_by_rows(int64_t rows, int64_t rows_per_micro_batch);

// At most `budget` valid tokens per micro-batch (a longer row gets one alone). First the fewest micro-batches that
// fit (first-fit decreasing); then, with `count` >= that many, the rows are spread over `count` micro-batches
// longest first onto the lightest one, kept when every micro-batch still fits the budget; otherwise the first-fit
// micro-batches are kept and fillers pad them to `count`.
int64_t min_micro_batches(const std::vector<int64_t>& valid_tokens, int64_t budget);
MicroBatchPlan plan_by_tokens(const std::vector<int64_t>& valid_tokens, int64_t budget, int64_t count);

// Valid tokens of each row: a packed batch's sequence lengths, attention_mask.sum(1), or the row length.
std::vector<int64_t> valid_tokens_per_row(const Batch& batch);

}  // namespace enginery
