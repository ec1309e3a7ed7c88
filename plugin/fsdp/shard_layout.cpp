#include "plugin/fsdp/shard_layout.h"

#include "host_api/error.h"

namespace enginery {
namespace fsdp {

ShardLayout::ShardLayout(std::vector<std::vector<int64_t>> shapes, int64_t world)
    : shapes_(std::move(shapes)), world_(world) {}

ShardLayout::~ShardLayout() = default;

std::unique_ptr<ShardLayout> ShardLayout::create(ShardingLayout layout, std::vector<std::vector<int64_t>> shapes,
                                                 int64_t world) {
  if (layout == ShardingLayout::kFlatParameter) return std::make_unique<FlatParamLayout>(std::move(shapes), world);
  return std::make_unique<PerParamLayout>(std::move(shapes), world);
}

const char* layout_name(ShardingLayout layout) {
  return layout == ShardingLayout::kFlatParameter ? "fsdp" : "fsdp2";
}

ShardingLayout layout_from_name(const std::string& name, const std::string& where) {
  if (name == "fsdp") return ShardingLayout::kFlatParameter;
  if (name == "fsdp2") return ShardingLayout::kPerParameter;
  throw EngineryError("unknown shard layout '" + name + "'", where, "fsdp, fsdp2");
}

ShardingLayout layout_for_backend(const std::string& backend) {
  if (backend == "fsdp") return ShardingLayout::kFlatParameter;
  if (backend == "fsdp2" || backend == "veomni") return ShardingLayout::kPerParameter;
  throw EngineryError("no shard layout for backend '" + backend + "'", "engine.strategy", "fsdp, fsdp2, veomni");
}

}  // namespace fsdp
}  // namespace enginery
