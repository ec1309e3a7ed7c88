#pragma once
// The sections of a run's configuration an engine reads, handed to it in its EngineArgs: by `enginery train` and by
// the Python module alike.
#include <string>

#include "config/train_config.h"
#include "host_api/base_engine.h"
#include "host_api/error.h"

namespace enginery {

// Copies model, engine, optim and checkpoint into `args`; the caller sets the rest (model type, device, ranks).
void set_engine_settings(EngineArgs& args, const TrainConfig& config);

// Whether dotted `key` lies in one of those four sections, and the sections as an allowed list for messages
// ("model.*, engine.*, optim.*, checkpoint.*").
bool is_engine_key(const std::string& key);
std::string engine_sections_allowed();

// A refusal that names a config key as its "where" (the registry's), rethrown naming where the user set that key
// (file:line:col, the --set flag or the Python dict's entry); any other refusal as it is.
[[noreturn]] void rethrow_at_origin(const EngineryError& e, const TrainConfig& config);

}  // namespace enginery
