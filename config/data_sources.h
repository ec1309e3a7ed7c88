#pragma once
// What data.train_files / data.val_files may name (README.md, "Data files"), spelled once: the config reader checks
// which keys a source reads, the datasets open it.
#include <string>

namespace enginery {

inline constexpr const char* kBuiltinAddition = "builtin:addition";
// The allowed values, for messages.
inline const std::string kDataSourcesAllowed = std::string(kBuiltinAddition) + ", <file>.jsonl, <file>.bin";

bool is_builtin_addition(const std::string& spec);
bool is_jsonl(const std::string& spec);
bool is_token_file(const std::string& spec);  // .bin: nanoGPT's uint16 tokens

}  // namespace enginery
