#include "host_api/weight_export.h"

namespace enginery {

WeightStream::~WeightStream() = default;
WeightExportingEngine::~WeightExportingEngine() = default;

}  // namespace enginery
