#include "host_api/train_state.h"

namespace enginery {

TrainStateEngine::~TrainStateEngine() = default;

}  // namespace enginery
