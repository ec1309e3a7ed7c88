#include "host_api/exports.h"

namespace enginery {

WeightStream::~WeightStream() = default;
ShardStream::~ShardStream() = default;

}  // namespace enginery
