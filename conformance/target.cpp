#include "conformance/target.h"

namespace enginery {
namespace conformance {

std::string missing_capability(const Target& target, const std::vector<std::string>& capabilities) {
  for (const std::string& capability : capabilities) {
    if (!target.has(capability)) return "its registration does not declare '" + capability + "'";
  }
  return "";
}

std::function<std::string(const Target&)> requires_precisions(std::vector<std::string> dtypes,
                                                              std::vector<std::string> other) {
  return [dtypes, other](const Target& target) {
    std::vector<std::string> needed;
    for (const std::string& dtype : dtypes) needed.push_back(target.precision_capability(dtype));
    needed.insert(needed.end(), other.begin(), other.end());
    return missing_capability(target, needed);
  };
}

const std::vector<Check>& all_checks() {
  static const std::vector<Check> checks = [] {
    std::vector<Check> list;
    add_precision_checks(list);
    add_loop_checks(list);
    add_training_checks(list);
    add_state_checks(list);
    add_export_checks(list);
    add_multirank_checks(list);
    return list;
  }();
  return checks;
}

}  // namespace conformance
}  // namespace enginery
