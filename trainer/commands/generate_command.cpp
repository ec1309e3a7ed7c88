// `enginery generate --model DIR --prompts FILE --out FILE [--greedy | --temperature T --top-p P --top-k K]
// [--max-new-tokens N --seed S --eos-token-id ID... --pad-token-id ID --batch-size B --dtype fp32|bf16|fp16
// --device cpu|cuda]`: continues token-id prompts with the KV-cache decoder (models/generation.h) and writes JSON
// {"responses": [[...]], "lengths": [...], "stopped": [...]}: per prompt the generated ids up to and including the
// stop token (no padding), their count, and whether a stop token ended it (else max-new-tokens did).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "host_api/error.h"
#include "models/causal_lm.h"
#include "models/generation.h"
#include "models/generation_settings.h"
#include "models/model_factory.h"
#include "support/durable_fs.h"
#include "trainer/command.h"
#include "trainer/data/dataset.h"
#include "trainer/data/token_file.h"

namespace enginery {
namespace {

struct GenerateArgs {
  std::string model, prompts, out, dtype = "fp32", device = "cpu";
  models::SamplingParams sampling;
  std::vector<int64_t> eos;    // empty: config.json's eos_token_id (an id or a list), if any
  std::optional<int64_t> pad;  // unset: config.json's pad_token_id, else 0
  int64_t batch_size = 64;
};

// An id or a list of ids under `key` of config.json's text; empty when absent or null.
std::vector<int64_t> config_ids(const std::string& raw_config, const char* key) {
  const auto j = nlohmann::json::parse(raw_config, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(key)) return {};
  const auto& v = j[key];
  if (v.is_number_integer()) return {v.get<int64_t>()};
  std::vector<int64_t> ids;
  if (v.is_array()) {
    for (const auto& x : v) {
      if (x.is_number_integer()) ids.push_back(x.get<int64_t>());
    }
  }
  return ids;
}

// Stop and pad ids: the flags', else the model's config.json's; every one inside the vocabulary.
void resolve_special_ids(GenerateArgs& a, const models::ModelArgs& args) {
  auto& sp = a.sampling;
  auto eos = a.eos.empty() ? config_ids(args.raw_config_json, "eos_token_id") : a.eos;
  const auto pad = config_ids(args.raw_config_json, "pad_token_id");
  sp.pad_token_id = a.pad ? *a.pad : (pad.empty() ? 0 : pad.front());
  const std::string range = "0 .. " + std::to_string(args.vocab_size - 1);
  for (int64_t id : eos) {
    if (id < 0 || id >= args.vocab_size) {
      throw EngineryError("eos id " + std::to_string(id) + " is outside the vocabulary", "--eos-token-id", range);
    }
  }
  if (sp.pad_token_id < 0 || sp.pad_token_id >= args.vocab_size) {
    throw EngineryError("pad id " + std::to_string(sp.pad_token_id) + " is outside the vocabulary", "--pad-token-id",
                        range);
  }
  if (!eos.empty()) sp.eos_token_id = eos.front();
  sp.stop_token_ids.assign(eos.begin() + (eos.empty() ? 0 : 1), eos.end());
}

// The flags as the shared check (models/generation_settings.h) names them.
models::GenerationSettingNames flag_names() {
  return {{"temperature", "--temperature"}, {"top-p", "--top-p"}, {"top-k", "--top-k"},
          {"max-new-tokens", "--max-new-tokens"}, {"dtype", "--dtype"}};
}

torch::Device device_of(const GenerateArgs& a) {
  return a.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

c10::ScalarType dtype_of(const GenerateArgs& a) {
  if (a.dtype == "bf16") return c10::kBFloat16;
  return a.dtype == "fp16" ? c10::kHalf : c10::kFloat;
}

// Every prompt non-empty; the longest leaves room for max-new-tokens within max_position_embeddings (the same
// check as GRPO's rollout, models/generation_settings.h).
void check_prompts(const std::vector<std::vector<int64_t>>& prompts, const GenerateArgs& a,
                   const models::ModelArgs& args) {
  models::GenerationTarget target;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string where = a.prompts + ": [" + std::to_string(i) + "]";
    if (prompts[i].empty()) throw EngineryError("an empty prompt", where, "at least one token id");
    if (static_cast<int64_t>(prompts[i].size()) > target.longest_prompt) {
      target.longest_prompt = static_cast<int64_t>(prompts[i].size());
      target.prompt_where = where;
    }
  }
  target.max_positions = args.max_position_embeddings;
  target.model = "--model " + a.model;
  target.model_type = args.model_type;
  target.dtype = dtype_of(a);
  target.device = device_of(a);
  models::check_generation_settings(a.sampling, target, flag_names());
}

// Prompts [begin, end) left-padded into one batch.
std::pair<torch::Tensor, torch::Tensor> left_pad(const std::vector<std::vector<int64_t>>& prompts, size_t begin,
                                                 size_t end, int64_t pad_id) {
  size_t p = 0;
  for (size_t i = begin; i < end; ++i) p = std::max(p, prompts[i].size());
  const int64_t b = static_cast<int64_t>(end - begin);
  auto ids = torch::full({b, static_cast<int64_t>(p)}, pad_id, torch::kLong);
  auto mask = torch::zeros({b, static_cast<int64_t>(p)}, torch::kLong);
  for (size_t i = begin; i < end; ++i) {
    const auto& s = prompts[i];
    const int64_t row = static_cast<int64_t>(i - begin), start = static_cast<int64_t>(p - s.size());
    std::copy(s.begin(), s.end(), ids[row].data_ptr<int64_t>() + start);
    mask[row].narrow(0, start, static_cast<int64_t>(s.size())).fill_(1);
  }
  return {ids, mask};
}

// The flags, before any model is built: the sampling values through the shared check (models/generation_settings.h),
// named as the user typed them. The lengths and the dtype on the device follow once prompts and model are known.
void check_flags(const GenerateArgs& a) {
  if (a.batch_size < 1) {
    throw EngineryError(std::to_string(a.batch_size) + " prompts per batch", "--batch-size", ">= 1");
  }
  if (a.device == "cuda" && !torch::cuda::is_available()) {
    throw EngineryError("CUDA is not available in this build or on this machine", "--device", "cpu");
  }
  models::check_sampling_values(a.sampling, flag_names());
}

int run_generate(GenerateArgs a) {
  check_flags(a);
  require_regular_file(a.prompts, "a JSON file of token-id lists");  // before the model is built: fails fast
  const torch::Device device = device_of(a);
  ModelConfig cfg;
  cfg.path = a.model;
  cfg.override_dtype = dtype_of(a);
  auto model = std::dynamic_pointer_cast<models::CausalLM>(models::build_model(cfg, "language_model", {device}));
  model->eval();
  const auto& args = model->args();
  resolve_special_ids(a, args);
  const auto prompts = read_token_lists(a.prompts, args.vocab_size, args.max_position_embeddings);
  check_prompts(prompts, a, args);

  nlohmann::json responses = nlohmann::json::array(), lengths = nlohmann::json::array(),
                 stopped = nlohmann::json::array();
  const uint64_t seed = a.sampling.seed;
  for (size_t begin = 0; begin < prompts.size(); begin += a.batch_size) {
    const size_t end = std::min(prompts.size(), begin + static_cast<size_t>(a.batch_size));
    auto [ids, mask] = left_pad(prompts, begin, end, a.sampling.pad_token_id);
    a.sampling.seed = seed + begin / a.batch_size;  // each batch its own stream, fixed by --seed
    auto r = models::generate(*model, ids, mask, a.sampling);
    auto seqs = r.sequences.to(torch::kCPU).contiguous();
    auto lens = r.response_lengths.to(torch::kCPU);
    const int64_t p = seqs.size(1) - r.response_mask.size(1);
    for (int64_t i = 0; i < seqs.size(0); ++i) {
      const int64_t len = lens[i].item<int64_t>();
      const int64_t* first = seqs[i].data_ptr<int64_t>() + p;
      std::vector<int64_t> resp(first, first + len);
      const auto& stops = a.sampling.stop_token_ids;
      const bool by_stop = len > 0 && (resp.back() == a.sampling.eos_token_id ||
                                       std::find(stops.begin(), stops.end(), resp.back()) != stops.end());
      responses.push_back(resp);
      lengths.push_back(len);
      stopped.push_back(by_stop);
    }
  }
  nlohmann::json out = {{"responses", responses}, {"lengths", lengths}, {"stopped", stopped}};
  durable::write_file(a.out, out.dump() + "\n");  // checked to the disk: a full disk is an error, not a cut file
  return 0;
}

CommandRegistration generate_registration(
    "generate", "Continue token-id prompts with a model: greedy or sampled, KV-cached (JSON in, JSON out)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<GenerateArgs>();
      auto& sp = a->sampling;
      sub.add_option("--model", a->model, "HF model directory (config.json + safetensors) or builtin:<name>")
          ->required();
      sub.add_option("--prompts", a->prompts, "JSON file: a list of token-id lists (non-empty)")->required();
      sub.add_option("--out", a->out,
                     "JSON file to write: {\"responses\": [[...]], \"lengths\": [...], \"stopped\": [...]}")
          ->required();
      sub.add_flag("--greedy", sp.greedy, "Argmax decoding (temperature, top-p, top-k ignored)");
      sub.add_option("--temperature", sp.temperature, "Sampling temperature, >= 0.01 (default 1)");
      sub.add_option("--top-p", sp.top_p, "Nucleus sampling mass in (0, 1]; 1 = off (default)");
      sub.add_option("--top-k", sp.top_k, "Sample among the k most likely tokens; 0 or -1 = off (default 0)");
      sub.add_option("--max-new-tokens", sp.max_new_tokens, "Tokens to generate at most per prompt (default 16)");
      sub.add_option("--seed", sp.seed, "Sampling seed (default 0); batch i uses seed + i");
      sub.add_option("--eos-token-id", a->eos,
                     "Stop token id(s) (repeatable); default: config.json's eos_token_id, none if absent");
      sub.add_option("--pad-token-id", a->pad, "Id written after a stop; default: config.json's pad_token_id, else 0");
      sub.add_option("--batch-size", a->batch_size, "Prompts decoded together (default 64)");
      sub.add_option("--dtype", a->dtype, "Parameter dtype: fp32, bf16 or fp16 (where the device computes in it)")
          ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
      sub.add_option("--device", a->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
      return [a] { return run_generate(*a); };
    });

}  // namespace
}  // namespace enginery
