#include "config/engine_settings.h"

namespace enginery {

void set_engine_settings(EngineArgs& args, const TrainConfig& config) {
  args.model = config.model;
  args.engine = config.engine;
  args.optim = config.optim;
  args.checkpoint = config.checkpoint;
}

}  // namespace enginery
