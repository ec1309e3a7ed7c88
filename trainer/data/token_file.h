#pragma once
// JSON files of token-id lists, the input of `enginery logprobs` (--tokens) and `enginery generate` (--prompts):
// the project has no tokenizer, so sequences travel as ids.
#include <cstdint>
#include <string>
#include <vector>

namespace enginery {

// A JSON list of lists of integer ids, every id inside [0, vocab) and every list at most max_positions long
// (> 0; 0: unchecked), checked before a model runs (an overlong sequence would otherwise try to allocate its
// attention). Only a regular file is opened. Errors name the file and the entry: "<path>: [i][k]".
std::vector<std::vector<int64_t>> read_token_lists(const std::string& path, int64_t vocab, int64_t max_positions);

}  // namespace enginery
