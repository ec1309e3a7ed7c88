#include "config/engine_settings.h"

#include <vector>

#include "support/list_text.h"

namespace enginery {
namespace {

const char* const kEngineSections[] = {"model", "engine", "optim", "checkpoint"};

}  // namespace

void set_engine_settings(EngineArgs& args, const TrainConfig& config) {
  args.model = config.model;
  args.engine = config.engine;
  args.optim = config.optim;
  args.checkpoint = config.checkpoint;
}

bool is_engine_key(const std::string& key) {
  const std::string section = key.substr(0, key.find('.'));
  for (const char* name : kEngineSections) {
    if (section == name) return true;
  }
  return false;
}

std::string engine_sections_allowed() {
  std::vector<std::string> names;
  for (const char* name : kEngineSections) names.push_back(std::string(name) + ".*");
  return join_list(names);
}

void rethrow_at_origin(const EngineryError& e, const TrainConfig& config) {
  if (config.origins.count(e.where())) throw EngineryError(e.what_failed(), config.where(e.where()), e.allowed());
  throw e;
}

}  // namespace enginery
