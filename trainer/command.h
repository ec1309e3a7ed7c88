#pragma once
// Subcommands of the `enginery` executable register themselves: each file in trainer/commands/ defines one
// static CommandRegistration, so adding a command never edits a shared file.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace enginery {

struct Command {
  std::string name;
  // Adds the subcommand's options to `sub`; returns the function that runs it (exit status).
  std::function<std::function<int()>(CLI::App& sub)> setup;
  std::string description;
};

std::vector<Command>& registered_commands();

struct CommandRegistration {
  CommandRegistration(std::string name, std::string description,
                      std::function<std::function<int()>(CLI::App& sub)> setup) {
    registered_commands().push_back({std::move(name), std::move(setup), std::move(description)});
  }
};

}  // namespace enginery
