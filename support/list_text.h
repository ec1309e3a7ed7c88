#pragma once
// "a, b, c": how the config reader's and the trainer's messages list allowed values and names.
#include <string>
#include <vector>

namespace enginery {

inline std::string join_list(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace enginery
