// One RL optimizer step of the fsdp2 engine over a ragged, verl-laid-out batch (docs/BENCHMARKS.md, "RL-shaped
// batches"): the C++ side of bench/gpu/run_rl_bench.sh and bench/cpu/run_rl_cpu_bench.sh. Reads the batch file of
// bench/gpu/make_rl_batch.py (the reference reads the same file), trains with the trainer's PPO clipped loss through
// the host's micro-batch loop, and prints one JSON line: valid tokens/s (padding not counted), step time, peak memory,
// the loss of the first step (before any update: every mode and the reference must agree on it) and its grad norm.
// Modes: padded (default), --remove-padding (model.use_remove_padding), --dynamic-bsz --max-token-len N
// (engine.use_dynamic_bsz, engine.max_token_len_per_gpu). Ranks as bench_engine_train: RANK/WORLD_SIZE/...; rank r
// takes the contiguous rows [r * N / W, (r + 1) * N / W) of the batch, as verl's DataProto.chunk dispatches them.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "host_api/error.h"
#include "models/safetensors.h"
#include "trainer/loop/losses.h"

namespace {

using namespace enginery;

// The tensors of make_rl_batch.py, in the engine's Batch names.
const char* const kBatchTensors[] = {"input_ids", "attention_mask", "loss_mask", "old_log_probs", "advantages"};

struct RlBatch {
  Batch rows;                  // this rank's share, on the engine's device
  int64_t num_seqs = 0;        // of the whole batch
  int64_t valid_tokens = 0;    // attention_mask.sum() of the whole batch
  int64_t padded_tokens = 0;   // num_seqs * row length
};

RlBatch load_rl_batch(const std::string& path, int64_t rank, int64_t world, const torch::Device& device) {
  const models::SafetensorsFile file(path);
  RlBatch out;
  Batch all;
  for (const char* name : kBatchTensors) {
    if (!file.contains(name)) {
      throw EngineryError(std::string("no tensor '") + name + "'", path, "a batch written by make_rl_batch.py");
    }
    all.set(name, file.tensor(name).clone());  // the file's mapping is read-only and goes with `file`
  }
  out.num_seqs = all.size();
  if (out.num_seqs < world) {
    throw EngineryError("fewer sequences (" + std::to_string(out.num_seqs) + ") than ranks", path,
                        ">= WORLD_SIZE rows");
  }
  const torch::Tensor& mask = all.at("attention_mask");
  out.valid_tokens = mask.sum().item<int64_t>();
  out.padded_tokens = mask.numel();
  out.rows = all.slice(rank * out.num_seqs / world, (rank + 1) * out.num_seqs / world).to(device);
  return out;
}

std::string mode_name(bool remove_padding, bool dynamic_bsz) {
  return std::string(remove_padding ? "packed" : "padded") + (dynamic_bsz ? "+dynamic" : "");
}

// Sums each value over the ranks (train_batch's loss is this rank's share of the global token mean).
std::vector<double> sum_over_ranks(const bench::Rank& me, std::vector<double> values) {
  if (me.env.world_size == 1) return values;
  std::vector<torch::Tensor> one{torch::tensor(values, torch::kDouble).to(me.device)};
  me.group->allreduce(one)->wait();
  const torch::Tensor total = one[0].cpu();
  for (size_t i = 0; i < values.size(); ++i) values[i] = total[static_cast<int64_t>(i)].item<double>();
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"enginery RL step benchmark (PPO loss, ragged batch)"};
  bench::EngineFlags flags;
  flags.mbs = 4;
  flags.steps = 3;
  flags.warmup = 1;
  std::string batch_file;
  bool remove_padding = false, dynamic_bsz = false;
  int64_t max_token_len = EngineConfig{}.max_token_len_per_gpu;
  LossSection ppo;
  ppo.type = "ppo";  // clip 0.2 both sides, dual clip 3.0: the trainer's defaults (verl's)
  bench::add_engine_flags(app, flags);
  app.add_option("--batch", batch_file, "safetensors batch written by bench/gpu/make_rl_batch.py")->required();
  app.add_flag("--remove-padding", remove_padding, "model.use_remove_padding: packed variable-length sequences");
  auto* dynamic = app.add_flag("--dynamic-bsz", dynamic_bsz, "engine.use_dynamic_bsz: micro-batches by a token budget");
  app.add_option("--max-token-len", max_token_len, "engine.max_token_len_per_gpu")->needs(dynamic);
  app.add_option("--clip-ratio", ppo.clip_ratio, "PPO clip (both sides)");
  CLI11_PARSE(app, argc, argv);

  const bench::Rank me = bench::join_world(flags.device);
  EngineArgs args = bench::engine_args(me, flags);
  args.model.use_remove_padding = remove_padding;
  args.engine.use_dynamic_bsz = dynamic_bsz;
  // Only with the flag: a budget without dynamic micro-batching is refused (engine_driver/config_checks.cpp).
  if (dynamic_bsz) args.engine.max_token_len_per_gpu = max_token_len;
  auto engine = bench::load_engine(flags, args);

  const RlBatch batch = load_rl_batch(batch_file, me.env.rank, me.env.world_size, me.device);
  const LossFn loss = make_loss(ppo);
  // The same batch every step: the first step's loss is the untrained policy's, comparable across modes.
  const bench::StepLog log = bench::run_steps(
      *engine, [&](int64_t) { return batch.rows; }, loss, flags.warmup, flags.steps, me.env.rank);
  const std::vector<double> losses = sum_over_ranks(me, log.losses);

  const double step_s = bench::mean(log.seconds);
  nlohmann::json result = {
      {"impl", "enginery-" + flags.backend}, {"mode", mode_name(remove_padding, dynamic_bsz)},
      {"device", flags.device}, {"world", me.env.world_size}, {"mbs", flags.mbs}, {"ac", flags.ac},
      {"max_token_len", dynamic_bsz ? max_token_len : 0}, {"num_seqs", batch.num_seqs},
      {"valid_tokens", batch.valid_tokens}, {"padded_tokens", batch.padded_tokens}, {"steps", flags.steps},
      {"step_s", step_s}, {"step_times", log.seconds},
      {"valid_tokens_per_s", static_cast<double>(batch.valid_tokens) / step_s},
      {"peak_mem_gib", bench::peak_memory_gib(flags.device)}, {"first_loss", losses.front()},
      {"losses", losses}, {"grad_norm", log.grad_norms.front()}, {"grad_norms", log.grad_norms}};
  bench::report(result, me.env.rank, flags.out);
  return 0;
}
