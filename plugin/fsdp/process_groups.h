#pragma once
// The FSDP engines' process groups, all made from the host's world group and store: the data-parallel groups
// (world, and with HSDP shard and replicate) and Ulysses' sequence and data groups (ulysses.h), both a grid of
// the world's ranks.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "host_api/base_engine.h"
#include "plugin/fsdp/collectives.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

// A process group of `size` ranks over a PrefixStore of EngineArgs.store at `prefix` (null when size is 1), waiting
// as long as the world group does. Only its members call it; `key` names the setting that asked for it in errors.
ENGINERY_FSDP_API c10::intrusive_ptr<compat::CommGroup> make_subgroup(const EngineArgs& args,
                                                                      const std::string& prefix, int rank, int size,
                                                                      const std::string& key);

// The world's ranks as a grid of rows of `row_size` consecutive ranks: this rank's row and its column (the ranks
// at its place in every row). Each rank makes just its own two groups; `name` and a per-process count keep the
// stores of several engines (actor and critic) and grids apart, as every rank builds them in the same order.
struct RankGrid {
  std::shared_ptr<Collectives> row;
  std::shared_ptr<Collectives> column;
};
ENGINERY_FSDP_API RankGrid make_rank_grid(const EngineArgs& args, int64_t row_size, const std::string& name,
                                          const std::string& key);

// The data-parallel process groups: world (all DP ranks), shard (within an HSDP group), replicate (across them).
struct ENGINERY_FSDP_API DpGroups {
  // fsdp_size <= 0 or == world size: plain FSDP (shard over everything, no replicas).
  static DpGroups create(const EngineArgs& args, int64_t fsdp_size);
  // The world ranks of this rank's shard group, ascending: the contiguous block create() puts it in.
  std::vector<int64_t> shard_ranks() const;
  std::shared_ptr<Collectives> world;
  std::shared_ptr<Collectives> shard;
  std::shared_ptr<Collectives> replicate;  // size 1 without HSDP
};

}  // namespace fsdp
}  // namespace enginery
