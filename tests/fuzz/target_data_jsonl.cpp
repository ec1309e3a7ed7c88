// Target of .jsonl training data (trainer/data/jsonl_row.cpp through open_dataset): every per-token field of a row.
// The loss, data.truncation, data.unknown_fields and the split come from the input's first line, so one corpus
// covers them all. A row that loads must hold what the training loop relies on (README.md, "Data files").
#include <algorithm>
#include <sstream>

#include "host_api/error.h"
#include "tests/fuzz/targets.h"
#include "trainer/data/dataset.h"

namespace enginery {
namespace fuzz {
namespace {

constexpr int64_t kMaxLength = 6;

// The options come from an optional first line "#<loss> <truncation> <unknown_fields> <split>" (mutated like the
// rest, so the fuzzer explores them too); anything missing or unknown keeps the default (sft, error, error, train).
JsonlOptions options_for(const std::string& header) {
  std::istringstream words(header.size() > 1 && header[0] == '#' ? header.substr(1) : "");
  std::string loss, truncation, unknown, split;
  words >> loss >> truncation >> unknown >> split;
  JsonlOptions o;
  if (loss == "ppo") o.loss_inputs = {"old_log_probs", "advantages"};
  if (loss == "value") o.loss_inputs = {"values", "returns"};
  o.loss_name = "loss.type = " + (o.loss_inputs.empty() ? std::string("sft") : loss);
  if (truncation == "left" || truncation == "right") o.truncation = truncation;
  if (unknown == "ignore") o.unknown_fields = unknown;
  o.require_loss_inputs = split != "val";
  return o;
}

void check_example(const Example& ex, const JsonlOptions& o) {
  const size_t n = ex.input_ids.size();
  if (n < 1 || n > static_cast<size_t>(kMaxLength)) throw Finding("a row of " + std::to_string(n) + " tokens loaded");
  if (ex.loss_mask.size() != n) throw Finding("loss_mask is not as long as input_ids");
  if (ex.loss_mask[0] != 0.0f) throw Finding("position 0 is a target");
  bool any = false;
  for (float m : ex.loss_mask) {
    if (m != 0.0f && m != 1.0f) throw Finding("loss_mask holds " + std::to_string(m));
    any = any || m != 0.0f;
  }
  if (!any) throw Finding("a row without a target loaded");
  for (const auto& id : ex.input_ids) {
    if (id < 0 || id >= 1000) throw Finding("token id " + std::to_string(id) + " loaded");
  }
  for (const auto& [name, values] : ex.extras) {
    if (std::find(o.loss_inputs.begin(), o.loss_inputs.end(), name) == o.loss_inputs.end()) {
      throw Finding("a field the loss does not read was kept: " + name);
    }
    if (values.size() != n) throw Finding(name + " is not as long as input_ids");
  }
  if (o.require_loss_inputs && ex.extras.size() != o.loss_inputs.size()) throw Finding("a loss input is missing");
  if (!o.require_loss_inputs && !ex.extras.empty()) throw Finding("a validation row kept a loss input");
}

}  // namespace

namespace data_jsonl {
void fuzz_one(const std::string& input) {
  const std::filesystem::path path = scratch_dir() / "data.jsonl";
  const bool has_header = !input.empty() && input[0] == '#';
  const size_t body = has_header ? std::min(input.size(), input.find('\n') + 1) : 0;
  write_file(path, input.substr(body));
  const JsonlOptions options = options_for(input.substr(0, body));
  const auto data = open_dataset(path.string(), "train", kMaxLength, 3, 0, 1,
                                 TokenLimits{1000, 8, "model.path = fuzz"}, options);
  for (int64_t i = 0; i < data->size(); ++i) check_example(data->get(i), options);
}
}  // namespace data_jsonl

Target data_jsonl_target() {
  Target t;
  t.name = "data_jsonl";
  t.syntax = Syntax::kJson;
  t.fuzz_one = data_jsonl::fuzz_one;
  t.seeds = [] {
    return std::vector<std::string>{
        "{\"input_ids\": [5, 6, 7, 8], \"loss_mask\": [0, 0, 1, 1]}\n{\"input_ids\": [9, 10, 11]}\n",
        "#sft error error train\n{\"input_ids\": [5, 6, 7, 8, 0, 0], \"attention_mask\": [1, 1, 1, 1, 0, 0], "
        "\"length\": 4, \"loss_mask\": [false, false, true, true, false, false]}\n",
        "#ppo error error train\n{\"input_ids\": [1, 2, 3], \"old_log_probs\": [-0.5, -1, -2], "
        "\"advantages\": [0.5, -1, 2]}\n",
        "#value error ignore val\n{\"input_ids\": [1, 2, 3], \"values\": [0.1, 0.2, 0.3], \"returns\": [1, 1, 1], "
        "\"loss_mask\": [0, 1, 1], \"text\": \"kept out\"}\n",
        "#sft left error train\n{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "
        "\"loss_mask\": [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]}\n"};
  };
  t.dictionary = {"\"input_ids\"", "\"loss_mask\"", "\"attention_mask\"", "\"length\"", "\"old_log_probs\"",
                  "\"advantages\"", "\"values\"", "\"returns\"", "\"loss_msk\"", "#ppo", "#value", "left", "right",
                  "ignore", "val", "[1, 1, 0]", "[0, 1, 1]", "-1", "1e39", "18446744073709551615", "true", "null"};
  return t;
}

}  // namespace fuzz
}  // namespace enginery
