#pragma once
// Which parts of an FSDP engine's state (verl's to(device, model, optimizer, grad)) are away from the device it
// computes on: what FSDPEngine::move_state moved to the host and not back (fsdp_engine_offload.cpp). State that
// engine.param_offload / optimizer_offload keep on the host is at home there and never counts as away.
#include <string>

namespace enginery {
namespace fsdp {

struct StateParts {
  bool model = false;      // the fp32 master shards
  bool optimizer = false;  // AdamW's moments and device step counters
  bool grad = false;       // the shard gradients
};

class Residency {
 public:
  bool any_away() const { return away_.model || away_.optimizer || away_.grad; }
  // Of `asked`, the parts not already where `away` puts them (what a move has to copy).
  StateParts to_move(const StateParts& asked, bool away) const;
  void moved(const StateParts& parts, bool away);
  // The names of the parts of `needed` that are away ("model, grad"); empty when all of them are home.
  std::string away_among(const StateParts& needed) const;

 private:
  StateParts away_;
};

}  // namespace fsdp
}  // namespace enginery
