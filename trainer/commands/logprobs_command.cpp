// `enginery logprobs --model DIR --tokens FILE --out FILE [--dtype fp32|bf16] [--device cpu|cuda]`: per-token
// log-probs and entropies of token sequences under an HF (or built-in) model, as JSON
// {"log_probs": [[...]], "entropy": [[...]]} with log_probs[i][t] = log p(tokens[i][t+1] | tokens[i][0..t]).
#include <nlohmann/json.hpp>

#include <iostream>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/model_factory.h"
#include "models/sequence_scores.h"
#include "support/durable_fs.h"
#include "trainer/command.h"
#include "trainer/data/dataset.h"
#include "trainer/data/token_file.h"

namespace enginery {
namespace {

struct LogprobsArgs {
  std::string model, tokens, out, dtype = "fp32", device = "cpu";
  int64_t max_batch_tokens = 8192;
};

int run_logprobs(const LogprobsArgs& a) {
  if (a.dtype != "fp32" && a.dtype != "bf16") throw EngineryError("unknown dtype '" + a.dtype + "'", "--dtype", "fp32, bf16");
  if (a.device != "cpu" && a.device != "cuda") throw EngineryError("unknown device '" + a.device + "'", "--device", "cpu, cuda");
  if (a.device == "cuda" && !torch::cuda::is_available()) {
    throw EngineryError("CUDA is not available in this build or on this machine", "--device", "cpu");
  }
  require_regular_file(a.tokens, "a JSON file of token-id lists");  // before the model is built: fails fast
  const torch::Device device = a.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  ModelConfig cfg;
  cfg.path = a.model;
  auto model = models::build_model(cfg, "language_model", {device});
  model->eval();
  auto* lm = dynamic_cast<models::CausalLM*>(model.get());
  const auto tokens = read_token_lists(a.tokens, lm->args().vocab_size, lm->args().max_position_embeddings);
  models::ScoreOptions opts;
  opts.device = device;
  opts.compute_dtype = a.dtype == "bf16" ? c10::kBFloat16 : c10::kFloat;
  opts.max_batch_tokens = a.max_batch_tokens;
  auto scores = models::score_sequences(*model, tokens, opts);
  nlohmann::json out = {{"log_probs", scores.log_probs}, {"entropy", scores.entropy}};
  durable::write_file(a.out, out.dump() + "\n");  // checked to the disk: a full disk is an error, not a cut file
  return 0;
}

CommandRegistration logprobs_registration(
    "logprobs", "Per-token log-probs and entropies of token sequences under a model (JSON in, JSON out)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<LogprobsArgs>();
      sub.add_option("--model", a->model, "HF model directory (config.json + safetensors) or builtin:<name>")
          ->required();
      sub.add_option("--tokens", a->tokens, "JSON file: a list of token-id lists of any lengths")->required();
      sub.add_option("--out", a->out, "JSON file to write: {\"log_probs\": [[...]], \"entropy\": [[...]]}")->required();
      sub.add_option("--dtype", a->dtype, "Compute dtype: fp32, or bf16 (autocast)")->check(CLI::IsMember({"fp32", "bf16"}));
      sub.add_option("--device", a->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
      sub.add_option("--max-batch-tokens", a->max_batch_tokens, "Padded tokens per forward (default 8192)");
      return [a] { return run_logprobs(*a); };
    });

}  // namespace
}  // namespace enginery
