#include "trainer/data/jsonl_row.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>

#include "host_api/error.h"
#include "support/list_text.h"

namespace enginery {
namespace {

const char* kMaskAllowed = "0 or 1 (or false / true) per token";

// The entry `t` of a per-token field, for messages: "loss_mask[3] = -1".
std::string entry(const std::string& field, size_t t, const nlohmann::json& value) {
  return field + "[" + std::to_string(t) + "] = " + value.dump();
}

// A per-token array of exactly `n` entries (the row's input_ids), or an error naming the field.
const nlohmann::json& per_token_array(const nlohmann::json& row, const std::string& field, size_t n,
                                      const std::string& where) {
  const nlohmann::json& value = row.at(field);
  if (!value.is_array()) {
    throw EngineryError("\"" + field + "\" must be an array with one entry per token, got " + value.dump(), where,
                        "an array as long as input_ids");
  }
  if (value.size() != n) {
    throw EngineryError("\"" + field + "\" has " + std::to_string(value.size()) + " entries, input_ids " +
                            std::to_string(n),
                        where, "one entry per token of input_ids");
  }
  return value;
}

// loss_mask and attention_mask: 0 or 1 per token. A weight, a negative value or NaN would train silently wrong
// (a negative loss_mask pushes the target's probability down), so anything else is refused.
std::vector<float> binary_mask(const nlohmann::json& row, const std::string& field, size_t n,
                               const std::string& where) {
  const nlohmann::json& value = per_token_array(row, field, n, where);
  std::vector<float> out;
  out.reserve(n);
  for (size_t t = 0; t < n; ++t) {
    const nlohmann::json& v = value[t];
    if (v.is_boolean()) {
      out.push_back(v.get<bool>() ? 1.0f : 0.0f);
      continue;
    }
    if (!v.is_number() || (v.get<double>() != 0.0 && v.get<double>() != 1.0)) {
      throw EngineryError(entry(field, t, v) + " is not 0 or 1", where, kMaskAllowed);
    }
    out.push_back(static_cast<float>(v.get<double>()));
  }
  return out;
}

// A loss input (old_log_probs, advantages, values, returns): finite float32 per token; log-probs also <= 0.
std::vector<float> float_field(const nlohmann::json& row, const std::string& field, size_t n,
                               const std::string& where) {
  const nlohmann::json& value = per_token_array(row, field, n, where);
  const bool log_prob = field == "old_log_probs";
  const std::string allowed = log_prob ? "finite numbers <= 0 (log-probabilities)" : "finite float32 numbers";
  std::vector<float> out;
  out.reserve(n);
  for (size_t t = 0; t < n; ++t) {
    const nlohmann::json& v = value[t];
    const float f = v.is_number() ? static_cast<float>(v.get<double>()) : 0.0f;
    if (!v.is_number() || !std::isfinite(f) || (log_prob && f > 0.0f)) {
      throw EngineryError(entry(field, t, v) + " is out of range", where, allowed);
    }
    out.push_back(f);
  }
  return out;
}

std::vector<int64_t> token_ids(const nlohmann::json& row, const std::string& where, const TokenLimits& limits) {
  std::vector<int64_t> ids;
  const nlohmann::json& value = row.at("input_ids");
  ids.reserve(value.size());
  for (size_t t = 0; t < value.size(); ++t) {
    const nlohmann::json& id = value[t];
    // An unsigned id above int64's range would read back negative: it is named as written.
    if (!id.is_number_integer() || (id.is_number_unsigned() && id.get<uint64_t>() > INT64_MAX)) {
      throw EngineryError(entry("input_ids", t, id) + " is not a token id", where,
                          limits.vocab_size > 0 ? "integers 0.." + std::to_string(limits.vocab_size - 1)
                                                : "non-negative integers");
    }
    check_token_id(id.get<int64_t>(), limits, where + ": input_ids");
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

// How many leading tokens are real: `length` and attention_mask (1s, then 0s for right padding) must agree; with
// neither, all of them.
size_t real_length(const nlohmann::json& row, const std::string& where, size_t n) {
  std::optional<size_t> from_mask, from_length;
  if (row.contains("attention_mask")) {
    const std::vector<float> mask = binary_mask(row, "attention_mask", n, where);
    const size_t ones = static_cast<size_t>(std::find(mask.begin(), mask.end(), 0.0f) - mask.begin());
    for (size_t t = ones; t < n; ++t) {
      if (mask[t] != 0.0f) {
        throw EngineryError("attention_mask[" + std::to_string(t) + "] = 1 follows a 0: only right padding is read",
                            where, "1s for the real tokens, then 0s for padding");
      }
    }
    from_mask = ones;
  }
  if (row.contains("length")) {
    const nlohmann::json& length = row.at("length");
    const bool in_range = length.is_number_integer() && length.get<int64_t>() >= 2 &&
                          length.get<int64_t>() <= static_cast<int64_t>(n);
    if (!in_range) {
      throw EngineryError("length = " + length.dump() + " does not fit a row of " + std::to_string(n) + " tokens",
                          where, "an integer 2.." + std::to_string(n) + ": the real tokens, the rest is padding");
    }
    from_length = static_cast<size_t>(length.get<int64_t>());
  }
  if (from_mask && from_length && *from_mask != *from_length) {
    throw EngineryError("length = " + std::to_string(*from_length) + " but attention_mask marks " +
                            std::to_string(*from_mask) + " real tokens",
                        where, "the same count in both");
  }
  const size_t real = from_mask ? *from_mask : (from_length ? *from_length : n);
  if (real < 2) {
    throw EngineryError("attention_mask marks " + std::to_string(real) + " real tokens", where,
                        "at least 2 real tokens (a target needs a token before it)");
  }
  return real;
}

// Keeps [begin, begin + count) of a per-token vector.
template <typename T>
void keep(std::vector<T>& values, size_t begin, size_t count) {
  values = std::vector<T>(values.begin() + static_cast<std::ptrdiff_t>(begin),
                          values.begin() + static_cast<std::ptrdiff_t>(begin + count));
}

// The fields every row may carry, whatever the loss.
const std::vector<std::string> kBaseRowFields = {"input_ids", "loss_mask", "attention_mask", "length"};

void check_field_names(const nlohmann::json& row, const std::string& where, const JsonlOptions& options) {
  std::set<std::string> known(kBaseRowFields.begin(), kBaseRowFields.end());
  known.insert(options.loss_inputs.begin(), options.loss_inputs.end());
  for (const auto& item : row.items()) {
    const std::string& name = item.key();
    if (known.count(name)) continue;
    auto other = options.other_loss_inputs.find(name);
    if (other != options.other_loss_inputs.end()) {
      throw EngineryError("\"" + name + "\" is read only under " + other->second + "; this run's " +
                              options.loss_name + " does not read it",
                          where, allowed_row_fields(options) + " (or data.unknown_fields = \"ignore\")");
    }
    if (options.unknown_fields == "ignore") continue;
    throw EngineryError("unknown field \"" + name + "\"", where,
                        allowed_row_fields(options) + " (or data.unknown_fields = \"ignore\" to skip others)");
  }
}

}  // namespace

std::string allowed_row_fields(const JsonlOptions& options) {
  std::vector<std::string> names = kBaseRowFields;
  names.insert(names.end(), options.loss_inputs.begin(), options.loss_inputs.end());
  return join_list(names);
}

Example parse_jsonl_row(const nlohmann::json& row, const std::string& where, int64_t max_length,
                        const TokenLimits& limits, const JsonlOptions& options) {
  if (!row.is_object() || !row.contains("input_ids") || !row["input_ids"].is_array()) {
    throw EngineryError("each line needs an array \"input_ids\"", where, allowed_row_fields(options));
  }
  check_field_names(row, where, options);
  Example ex;
  ex.input_ids = token_ids(row, where, limits);
  const size_t n = ex.input_ids.size();
  if (n < 2) throw EngineryError("input_ids needs at least 2 tokens", where, "rows of 2 or more tokens");
  const size_t real = real_length(row, where, n);

  ex.loss_mask = row.contains("loss_mask") ? binary_mask(row, "loss_mask", n, where) : std::vector<float>(n, 1.0f);
  if (row.contains("loss_mask")) {
    for (size_t t = real; t < n; ++t) {
      if (ex.loss_mask[t] != 0.0f) {
        throw EngineryError("loss_mask[" + std::to_string(t) + "] = 1 marks a padding token as a target", where,
                            "loss_mask 0 wherever attention_mask is 0 (or past length)");
      }
    }
  }
  for (const std::string& name : options.loss_inputs) {
    if (!row.contains(name)) {
      if (!options.require_loss_inputs) continue;
      throw EngineryError(options.loss_name + " reads \"" + name + "\", which this row lacks", where,
                          "rows with " + join_list(options.loss_inputs));
    }
    std::vector<float> values = float_field(row, name, n, where);
    // evaluation reads none: a val row's are checked only
    if (options.require_loss_inputs) ex.extras[name] = std::move(values);
  }

  // Padding goes; then a row longer than data.max_length is refused or cut as data.truncation says.
  size_t begin = 0, count = real;
  const size_t limit = static_cast<size_t>(std::max<int64_t>(max_length, 1));
  if (count > limit) {
    if (options.truncation == "error") {
      throw EngineryError("a row of " + std::to_string(count) + " tokens is longer than data.max_length = " +
                              std::to_string(max_length),
                          where,
                          "rows of at most " + std::to_string(max_length) +
                              " tokens, or data.truncation = \"left\" / \"right\" to cut longer ones");
    }
    if (options.truncation == "left") begin = count - limit;
    count = limit;
  }
  keep(ex.input_ids, begin, count);
  keep(ex.loss_mask, begin, count);
  for (auto& [name, values] : ex.extras) keep(values, begin, count);
  check_sequence_length(static_cast<int64_t>(count), limits, where,
                        count < real ? "a row (cut to data.max_length)" : "a row");
  ex.loss_mask[0] = 0.0f;  // position 0 has no context: never a target (host_api/batch.h)
  if (std::none_of(ex.loss_mask.begin(), ex.loss_mask.end(), [](float m) { return m != 0.0f; })) {
    const std::string cut = count < real ? " after data.truncation = \"" + options.truncation + "\" cut it to " +
                                               std::to_string(count) + " tokens"
                                         : "";
    throw EngineryError("loss_mask selects no target token" + cut + " (position 0 is never one)", where,
                        "rows whose loss_mask has a 1 at some position after the first");
  }
  return ex;
}

}  // namespace enginery
