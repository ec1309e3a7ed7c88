#include "plugin/fsdp/residency.h"

#include <vector>

#include "support/list_text.h"

namespace enginery {
namespace fsdp {

StateParts Residency::to_move(const StateParts& asked, bool away) const {
  return {asked.model && away_.model != away, asked.optimizer && away_.optimizer != away,
          asked.grad && away_.grad != away};
}

void Residency::moved(const StateParts& parts, bool away) {
  if (parts.model) away_.model = away;
  if (parts.optimizer) away_.optimizer = away;
  if (parts.grad) away_.grad = away;
}

std::string Residency::away_among(const StateParts& needed) const {
  std::vector<std::string> parts;
  if (needed.model && away_.model) parts.emplace_back("model");
  if (needed.optimizer && away_.optimizer) parts.emplace_back("optimizer");
  if (needed.grad && away_.grad) parts.emplace_back("grad");
  return join_list(parts);
}

}  // namespace fsdp
}  // namespace enginery
