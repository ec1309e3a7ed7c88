#include "config/data_sources.h"

namespace enginery {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool is_builtin_addition(const std::string& spec) { return spec == kBuiltinAddition; }

bool is_jsonl(const std::string& spec) { return ends_with(spec, ".jsonl"); }

bool is_token_file(const std::string& spec) { return ends_with(spec, ".bin"); }

}  // namespace enginery
