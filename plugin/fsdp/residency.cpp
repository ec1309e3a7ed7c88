#include "plugin/fsdp/residency.h"

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
  std::string parts;
  auto add = [&](bool wanted, bool is_away, const char* name) {
    if (wanted && is_away) parts += (parts.empty() ? "" : ", ") + std::string(name);
  };
  add(needed.model, away_.model, "model");
  add(needed.optimizer, away_.optimizer, "optimizer");
  add(needed.grad, away_.grad, "grad");
  return parts;
}

}  // namespace fsdp
}  // namespace enginery
