#include "engine_driver/step_loop.h"

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>

#include "engine_driver/engine_access.h"
#include "engine_driver/micro_batch_plan.h"
#include "engine_driver/mode_guard.h"
#include "engine_driver/padded_edge.h"
#include "engine_driver/scalar_all_reduce.h"
#include "host_api/error.h"

namespace enginery {
namespace {

// Target tokens of a packed batch: loss_mask's ones ([Note: packed batch]).
double count_target_tokens(const Batch& batch) {
  return batch.has("loss_mask") ? batch.at("loss_mask").sum().item<double>() : 0.0;
}

bool wants_entropy(const Batch& batch) {
  if (!batch.has_meta("calculate_entropy")) return false;
  const bool* on = std::get_if<bool>(&batch.meta("calculate_entropy"));
  if (on == nullptr) throw EngineryError("must be a boolean", "batch metadata 'calculate_entropy'", "true, false");
  return *on;
}

// Adds `value` into `into` (which may be undefined).
void accumulate(torch::Tensor& into, const torch::Tensor& value) { into = into.defined() ? into + value : value; }

// A micro-batch that adds nothing: the batch's first row with no target token, so the loss contract (a sum over
// target tokens) makes its loss and every gradient zero. It runs only so that this rank's collectives pair up with
// a rank that has more micro-batches.
Batch filler(const Batch& batch) {
  Batch one = batch.slice(0, 1);
  if (one.has("loss_mask")) one.set("loss_mask", torch::zeros_like(one.at("loss_mask")));
  return one;
}

// A filler's loss: zero, through every output the model made, so its backward still runs every unit's collectives
// and adds zero gradients. The caller's loss function never sees a filler: it is not the caller's data, and a loss
// over no target (a mean, say) could be 0 / 0.
LossResult filler_loss(const ModelOutput& output, const Batch&, const LossContext&) {
  torch::Tensor zero;
  for (const torch::Tensor& t : {output.log_probs, output.entropy, output.values}) {
    if (t.defined()) zero = zero.defined() ? zero + t.sum() * 0.0 : t.sum() * 0.0;
  }
  return LossResult{zero, {}};
}

// Per-token outputs concatenated in run order (the rows `rows`), put back in the batch's order of sequences.
torch::Tensor in_batch_order(const torch::Tensor& run_order, const std::vector<int64_t>& rows,
                             const std::vector<int64_t>& lengths) {
  bool identity = true;
  for (size_t i = 0; i < rows.size() && identity; ++i) identity = rows[i] == static_cast<int64_t>(i);
  if (identity) return run_order;
  std::vector<int64_t> start(lengths.size());
  int64_t at = 0;
  for (int64_t r : rows) {
    start[static_cast<size_t>(r)] = at;
    at += lengths[static_cast<size_t>(r)];
  }
  std::vector<int64_t> index;
  index.reserve(static_cast<size_t>(at));
  for (size_t r = 0; r < lengths.size(); ++r) {
    for (int64_t t = 0; t < lengths[r]; ++t) index.push_back(start[r] + t);
  }
  return run_order.index_select(0, torch::tensor(index, torch::kLong).to(run_order.device()));
}

// A few doubles all-reduced over the engine's group, on its device; a world of one skips the collective.
std::vector<double> all_reduce_over(const BaseEngine& e, std::vector<double> values, c10d::ReduceOp op) {
  if (e.get_data_parallel_size() <= 1) return values;
  return all_reduce_doubles(e.get_data_parallel_group(), std::move(values), op, e.device());
}

// Batch metadata `name` of type T when present (verl sends per-call micro-batching this way), else `fallback`.
template <typename T>
T meta_or(const Batch& batch, const std::string& name, T fallback, const char* allowed) {
  if (!batch.has_meta(name)) return fallback;
  const T* value = std::get_if<T>(&batch.meta(name));
  if (value == nullptr) throw EngineryError("has the wrong type", "batch metadata '" + name + "'", allowed);
  return *value;
}

// The micro-batching of this call: the engine's configuration, overridden by the batch's metadata
// micro_batch_size_per_gpu / use_dynamic_bsz / max_token_len_per_gpu, as verl's workers send them with each call
// (a log-prob pass may cut differently from the update). docs/ARCHITECTURE.md, "One step".
struct Micro {
  bool dynamic;
  int64_t rows, tokens;
};
Micro micro_batching(const BaseEngine& e, const Batch& batch) {
  const EngineConfig& engine = e.args().engine;
  Micro m{meta_or<bool>(batch, "use_dynamic_bsz", engine.use_dynamic_bsz, "true, false"),
          meta_or<int64_t>(batch, "micro_batch_size_per_gpu", engine.micro_batch_size_per_gpu, "an integer >= 1"),
          meta_or<int64_t>(batch, "max_token_len_per_gpu", engine.max_token_len_per_gpu, "an integer >= 1")};
  // Checked here as well as by the parser: engines are also built from code, and metadata comes with each call.
  const std::string key = m.dynamic ? "max_token_len_per_gpu" : "micro_batch_size_per_gpu";
  const int64_t value = m.dynamic ? m.tokens : m.rows;
  if (value <= 0) {
    throw EngineryError("must be positive, got " + std::to_string(value),
                        batch.has_meta(key) ? "batch metadata '" + key + "'" : "engine." + key, ">= 1");
  }
  return m;
}

// This rank's verdict on its batch (engine_driver/batch_check.h), thrown only once the ranks agree (agree_on_tokens).
// Whatever the check throws becomes the verdict: a rank that left here early would leave the others waiting in the
// agreement's all-reduce until collective_timeout_s.
std::optional<EngineryError> refusal_of(const BaseEngine& e, const Batch& batch, const BatchLimits& limits,
                                        bool needs_targets) {
  try {
    check_batch(batch, e.device(), limits, needs_targets);
  } catch (const EngineryError& error) {
    return error;
  } catch (const std::exception& error) {
    return EngineryError(std::string("could not be checked: ") + error.what(), "batch",
                         "tensors as host_api/batch.h describes them");
  }
  return std::nullopt;
}

// [Note: engines get int64 token ids] check_batch accepts int32 input_ids, position_ids and cu_seqlens, as
// torch's embedding and verl do; the models index with them (gather, rotary tables), which takes int64, so the loop
// hands engines int64, and cu_seqlens on the host, where it is read (Batch::to leaves it there).
Batch with_int64_ids(const Batch& batch) {
  Batch out = batch;
  for (const char* name : {"input_ids", "position_ids"}) {
    if (out.has(name) && out.at(name).scalar_type() != torch::kLong) out.set(name, out.at(name).to(torch::kLong));
  }
  if (out.packed()) out.set("cu_seqlens", out.at("cu_seqlens").to(torch::kCPU).to(torch::kLong));
  return out;
}

// The host loop's micro-batches for `batch` (engine_driver/micro_batch_plan.h); dynamic ones are agreed over the
// group. A refused batch gets none, but still takes part in the agreement.
MicroBatchPlan plan_micro_batches(const BaseEngine& e, const Batch& batch, bool refused) {
  const Micro micro = micro_batching(e, batch);
  if (!micro.dynamic) return refused ? MicroBatchPlan{} : plan_by_rows(batch.size(), micro.rows);
  const std::vector<int64_t> tokens = refused ? std::vector<int64_t>{} : valid_tokens_per_row(batch);
  const int64_t budget = micro.tokens;
  // Every rank runs as many micro-batches as the rank that needs the most, so their collectives pair up.
  const auto count =
      all_reduce_over(e, {static_cast<double>(min_micro_batches(tokens, budget))}, c10d::ReduceOp::MAX);
  if (refused) return {};
  MicroBatchPlan plan = plan_by_tokens(tokens, budget, static_cast<int64_t>(count[0]));
  static std::atomic<bool> warned{false};
  if (plan.oversize && !warned.exchange(true)) {
    std::cerr << "enginery: a sequence holds more valid tokens than max_token_len_per_gpu = " << budget
              << "; it runs as a micro-batch of its own (warned once)\n";
  }
  return plan;
}

// Every rank stops once the ranks know that `refusing` of them refused their batch (`rank_sum`: the sum of their
// ranks): the refusing rank with its own error, the others naming it, so that none waits in a collective.
void stop_if_refused(const BaseEngine& e, const std::optional<EngineryError>& mine, double refusing, double rank_sum) {
  if (refusing == 0.0) return;
  if (mine) throw *mine;
  const std::string who = refusing == 1.0 ? "rank " + std::to_string(static_cast<int64_t>(rank_sum)) + " refused its"
                                          : std::to_string(static_cast<int64_t>(refusing)) + " ranks refused their";
  throw EngineryError(who + " batch before any work (its error names the field and the row)",
                      "rank " + std::to_string(e.get_data_parallel_rank()) + ", forward_backward_batch");
}

// The global target-token count; throws when a rank refused its batch or the ranks disagree on the number of
// micro-batches.
// [Note: micro-batch loss scaling] (docs/ARCHITECTURE.md, "One step", Normalisation) Every micro-batch's loss is
// its sum over target tokens divided by the target tokens of the whole call on every rank (LossContext::
// global_num_tokens, counted here once before the first micro-batch), never a mean per micro-batch; engines sum
// gradients over ranks. So the losses of all micro-batches on all ranks add up to the global token mean, and any
// micro-batching or world size gives the gradients of one batch on one rank.
double agree_on_tokens(const BaseEngine& e, const Batch& batch, int64_t micro_batches,
                       const std::optional<EngineryError>& refusal) {
  // One all-reduce: the global token count, and (sum n, sum n^2) whose Cauchy-Schwarz equality W*sum(n^2) ==
  // (sum n)^2 holds exactly when every rank has the same number of micro-batches (so no rank waits forever in a
  // gradient reduction the others never start); then the refusing ranks' count and the sum of their ranks.
  const double n = static_cast<double>(micro_batches);
  const double refused = refusal ? 1.0 : 0.0;
  const auto stats = all_reduce_over(e,
                                     {refusal ? 0.0 : count_target_tokens(batch), n, n * n, refused,
                                      refused * static_cast<double>(e.get_data_parallel_rank())},
                                     c10d::ReduceOp::SUM);
  stop_if_refused(e, refusal, stats[3], stats[4]);
  const int64_t world = e.get_data_parallel_size();
  const double sum_n = stats[1], sum_n2 = stats[2];
  if (static_cast<double>(world) * sum_n2 != sum_n * sum_n) {
    throw EngineryError("ranks have different numbers of micro-batches (this rank: " + std::to_string(micro_batches) +
                            ", mean: " + std::to_string(sum_n / static_cast<double>(world)) +
                            "); give every rank the same number of rows, or set engine.use_dynamic_bsz = true",
                        "rank " + std::to_string(e.get_data_parallel_rank()) + ", engine.micro_batch_size_per_gpu");
  }
  return stats[0];
}

}  // namespace

BatchOutput forward_backward_batch(BaseEngine& engine, const Batch& given, const LossFn& loss_fn, bool forward_only,
                                   const BatchLimits& limits) {
  std::optional<torch::NoGradGuard> no_grad;
  if (forward_only) no_grad.emplace();
  const bool needs_targets = static_cast<bool>(loss_fn);
  const std::optional<EngineryError> refusal = refusal_of(engine, given, limits, needs_targets);
  // Engines receive packed batches only; a padded one is packed here and its loss and outputs handed back padded.
  std::optional<PaddedEdge> edge;
  if (!refusal && !given.packed()) edge.emplace(with_int64_ids(given));
  const Batch batch = refusal ? given : edge ? edge->packed() : with_int64_ids(given);
  const LossFn caller_loss = edge && loss_fn ? edge->padded_loss(loss_fn) : loss_fn;
  const MicroBatchPlan plan = plan_micro_batches(engine, batch, refusal.has_value());
  const int64_t real = static_cast<int64_t>(std::count_if(plan.rows.begin(), plan.rows.end(),
                                                          [](const auto& rows) { return !rows.empty(); }));

  LossContext ctx;
  ctx.global_num_tokens = agree_on_tokens(engine, batch, static_cast<int64_t>(plan.rows.size()), refusal);
  if (needs_targets && ctx.global_num_tokens == 0.0) {
    // Every rank sees the same count: all stop here. A loss over no target would be 0 / 0.
    throw EngineryError("has no target token" + std::string(engine.get_data_parallel_size() > 1 ? " on any rank" : "") +
                            ": every entry at a position >= 1 is 0, so the loss would be 0 / 0",
                        "batch['loss_mask']", "at least one 1 at a position >= 1 in each call's batch");
  }
  ctx.dp_size = engine.get_data_parallel_size();
  ctx.num_micro_batches = static_cast<int64_t>(plan.rows.size());
  ctx.calculate_entropy = wants_entropy(batch);
  // Hosts hand an optional input only to engines that declared it: an engine that does not scale its logits would
  // return log-probs at T = 1 for a caller that trains on them as if at T (docs/ARCHITECTURE.md, "One step").
  const double temperature = batch_temperature(batch);  // a bad value stops the call before any work
  if (temperature != 1.0 && !EngineAccess::declared(engine).temperature) {
    const EngineArgs& a = engine.args();
    throw EngineryError("is " + std::to_string(temperature) + ", but engine " + a.engine.strategy + " (" +
                            a.model_type + ", " + a.device + ") does not apply a temperature: its registration does "
                            "not declare the capability 'temperature'",
                        "batch metadata 'temperature'", "1, or an engine declaring the capability 'temperature'");
  }

  BatchOutput out;
  std::map<std::string, std::vector<torch::Tensor>> pieces;
  std::vector<int64_t> order;  // the batch row of each output row, in run order
  const LossFn filler_fn = loss_fn ? LossFn(filler_loss) : LossFn();
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    ctx.micro_batch_index = static_cast<int64_t>(i);
    const std::vector<int64_t>& rows = plan.rows[i];
    const bool is_filler = rows.empty();
    ctx.rows = rows;
    MicroBatchResult r = EngineAccess::forward_step(engine, is_filler ? filler(batch) : batch.select(rows),
                                                    is_filler ? filler_fn : caller_loss, ctx, forward_only);
    if (is_filler) continue;  // a filler adds no loss, metric or output
    if (r.loss.defined()) accumulate(out.loss, r.loss.detach());
    for (const auto& [name, t] : {std::pair{"log_probs", r.output.log_probs}, std::pair{"entropy", r.output.entropy},
                                  std::pair{"values", r.output.values}}) {
      if (t.defined()) pieces[name].push_back(t.detach());
    }
    for (const auto& [name, value] : r.metrics) {
      accumulate(out.metrics[name], value.detach().to(torch::kDouble) / static_cast<double>(real));
    }
    order.insert(order.end(), rows.begin(), rows.end());
  }
  if (!pieces.empty()) {
    const std::vector<int64_t> lengths = valid_tokens_per_row(batch);
    for (auto& [name, list] : pieces) out.outputs[name] = in_batch_order(torch::cat(list, 0), order, lengths);
  }
  if (edge) out.outputs = edge->padded_outputs(out.outputs);
  return out;
}

BatchOutput train_batch(BaseEngine& engine, const Batch& batch, const LossFn& loss_fn, const BatchLimits& limits) {
  engine.optimizer_zero_grad();
  BatchOutput out = forward_backward_batch(engine, batch, loss_fn, /*forward_only=*/false, limits);
  out.grad_norm = engine.optimizer_step();
  out.lr = engine.lr_scheduler_step();
  return out;
}

BatchOutput infer_batch(BaseEngine& engine, const Batch& batch, const LossFn& loss_fn, const BatchLimits& limits) {
  auto guard = eval_mode(engine);
  torch::NoGradGuard no_grad;
  return forward_backward_batch(engine, batch, loss_fn, /*forward_only=*/true, limits);
}

}  // namespace enginery
