// The `enginery` command: train, logprobs, plugins, conformance, plot. Each subcommand lives in trainer/commands/.
#include <exception>
#include <iostream>
#include <map>

#include "trainer/command.h"

namespace enginery {
std::vector<Command>& registered_commands() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace enginery

int main(int argc, char** argv) {
  CLI::App app{"enginery: sharded C++ training engines, loaded as plugins"};
  app.require_subcommand(1);
  std::map<CLI::App*, std::function<int()>> runners;
  for (const auto& command : enginery::registered_commands()) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    runners[sub] = command.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : runners) {
      if (sub->parsed()) return run();
    }
  } catch (const std::exception& e) {
    std::cerr << "enginery: error: " << e.what() << std::endl;
    return 1;
  }
  return 1;
}
