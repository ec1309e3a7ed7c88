#pragma once
// The sections of a run's configuration an engine reads, handed to it in its EngineArgs: by `enginery train` and by
// the Python module alike.
#include "config/train_config.h"
#include "host_api/base_engine.h"

namespace enginery {

// Copies model, engine, optim and checkpoint into `args`; the caller sets the rest (model type, device, ranks).
void set_engine_settings(EngineArgs& args, const TrainConfig& config);

}  // namespace enginery
