#include "host_api/shard_export.h"

namespace enginery {

ShardStream::~ShardStream() = default;
ShardExportingEngine::~ShardExportingEngine() = default;

}  // namespace enginery
