#include "plugin/fsdp/shard_layout.h"

#include "host_api/error.h"

namespace enginery {
namespace fsdp {

ShardLayout::ShardLayout(std::vector<std::vector<int64_t>> shapes, int64_t world)
    : shapes_(std::move(shapes)), world_(world) {}

ShardLayout::~ShardLayout() = default;

std::unique_ptr<ShardLayout> ShardLayout::create(const std::string& strategy,
                                                 std::vector<std::vector<int64_t>> shapes, int64_t world) {
  if (strategy == "fsdp") return std::make_unique<FlatParamLayout>(std::move(shapes), world);
  if (strategy == "fsdp2") return std::make_unique<PerParamLayout>(std::move(shapes), world);
  throw EngineryError("unknown sharding strategy '" + strategy + "'", "engine.strategy", "fsdp, fsdp2");
}

}  // namespace fsdp
}  // namespace enginery
