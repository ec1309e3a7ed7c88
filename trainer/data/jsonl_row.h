#pragma once
// One row of a .jsonl data file, checked field by field against the row itself (README.md, "Data files"): every
// per-token field has the row's length and values in its range, padding is marked consistently, the loss mask
// selects at least one target, and a field nothing reads is refused by name unless data.unknown_fields says
// otherwise. Errors name the file:line, the field and what is allowed.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainer/data/dataset.h"

namespace enginery {

// Parses and checks one row; `where` is "file:line". Padding (attention_mask 0s, tokens past `length`) is dropped,
// a row longer than `max_length` is refused or cut as `options.truncation` says, and loss_mask[0] is 0 (position 0
// has no context, host_api/batch.h).
Example parse_jsonl_row(const nlohmann::json& row, const std::string& where, int64_t max_length,
                        const TokenLimits& limits, const JsonlOptions& options);

// The names a row may carry under `options`, for messages: "input_ids, loss_mask, attention_mask, length, ...".
std::string allowed_row_fields(const JsonlOptions& options);

}  // namespace enginery
