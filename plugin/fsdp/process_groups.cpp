#include "plugin/fsdp/process_groups.h"

#include <atomic>

#include "host_api/error.h"

namespace enginery {
namespace fsdp {

c10::intrusive_ptr<compat::CommGroup> make_subgroup(const EngineArgs& args, const std::string& prefix, int rank,
                                                    int size, const std::string& key) {
  if (size == 1) return {};
  if (!args.store) {
    throw EngineryError("subgroups need EngineArgs.store", key + ", rank " + std::to_string(args.rank));
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, args.store);
  // The subgroups wait as long as the host's world group does (trainer.collective_timeout_s), never the backend's
  // own default (Gloo's is half an hour): EngineArgs carries no timeout, the world group's options do.
  std::chrono::milliseconds timeout{0};
  if (args.world_group) {
    try {
      timeout = args.world_group->getBackendOptions()->timeout;
    } catch (const std::exception&) {
      // A group type without options keeps the backend's default.
    }
  }
  return args.device == "cuda" ? compat::make_nccl_group(store, rank, size, timeout)
                               : compat::make_gloo_group(store, rank, size, timeout);
}

RankGrid make_rank_grid(const EngineArgs& args, int64_t row_size, const std::string& name, const std::string& key) {
  static std::atomic<int> instance{0};
  const std::string base = "enginery_" + name + "/" + std::to_string(instance++) + "/";
  const int64_t rank = args.rank, rows = args.world_size / row_size;
  const int64_t row = rank / row_size, place = rank % row_size;
  RankGrid g;
  g.row = std::make_shared<Collectives>(
      make_subgroup(args, base + "row/" + std::to_string(row), static_cast<int>(place), static_cast<int>(row_size),
                    key),
      place, row_size);
  g.column = std::make_shared<Collectives>(
      make_subgroup(args, base + "column/" + std::to_string(place), static_cast<int>(row), static_cast<int>(rows),
                    key),
      row, rows);
  return g;
}

DpGroups DpGroups::create(const EngineArgs& args, int64_t fsdp_size) {
  const int64_t world = args.world_size;
  DpGroups g;
  g.world = std::make_shared<Collectives>(args.world_group, args.rank, world);
  if (fsdp_size <= 0 || fsdp_size >= world) {  // verl's reading: a shard group as large as the world or larger
    g.shard = g.world;
    g.replicate = std::make_shared<Collectives>(c10::intrusive_ptr<compat::CommGroup>(), 0, 1);
    return g;
  }
  if (world % fsdp_size != 0) {
    throw EngineryError("fsdp_size " + std::to_string(fsdp_size) + " does not divide the data-parallel size " +
                            std::to_string(world),
                        "engine.fsdp_size", "-1, a divisor of the world size, or the world size or more");
  }
  RankGrid grid = make_rank_grid(args, fsdp_size, "fsdp", "engine.fsdp_size");
  g.shard = std::move(grid.row);
  g.replicate = std::move(grid.column);
  return g;
}

std::vector<int64_t> DpGroups::shard_ranks() const {
  const int64_t size = shard->size(), first = world->rank() / size * size;
  std::vector<int64_t> ranks;
  for (int64_t i = 0; i < size; ++i) ranks.push_back(first + i);
  return ranks;
}

}  // namespace fsdp
}  // namespace enginery
