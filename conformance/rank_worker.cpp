#include "conformance/rank_worker.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "host_api/error.h"
#include "registry/plugin_loader.h"
#include "conformance/engine_setup.h"

extern char** environ;

namespace enginery {
namespace conformance {

ParamList parity_run(BaseEngine& engine, const Target& target, int64_t rank, int64_t world_size) {
  const Batch batch = make_batch(target, 4, 16, 4242);
  const int64_t rows = batch.size() / world_size;
  const Batch local = batch.slice(rank * rows, (rank + 1) * rows);
  const LossFn loss = token_mean_loss(target);
  std::vector<double> norms;
  for (int step = 0; step < kParitySteps; ++step) norms.push_back(engine.train_batch(local, loss).grad_norm.item<double>());
  ParamList result = read_params(engine);
  for (size_t i = 0; i < norms.size(); ++i) {
    result.emplace_back("grad_norm." + std::to_string(i), torch::tensor({norms[i]}, torch::kDouble));
  }
  return result;
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int64_t env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw EngineryError(std::string(name) + " is not set", "rank worker");
  return std::stoll(value);
}

}  // namespace

int run_rank_worker(const std::string& spec_file) {
  int64_t rank = -1;
  try {
    rank = env_int("RANK");
    const int64_t world_size = env_int("WORLD_SIZE");
    torch::set_num_threads(1);  // the ranks share the host's cores
    const auto spec = nlohmann::json::parse(read_text(spec_file));
    EngineRegistry registry;
    PluginLoader loader({{spec.at("plugin_dir").get<std::string>(), "--plugin-dir", true}});
    PluginLoadReport report = loader.load(registry);
    Target target;
    target.key = {spec.at("model_type").get<std::string>(), spec.at("backend").get<std::string>(),
                  spec.at("device").get<std::string>()};
    target.registry = &registry;
    target.model_path = spec.at("model_path").get<std::string>();
    if (!registry.has(target.key)) {
      std::string reasons;
      for (const auto& rejected : report.rejected) reasons += "\n  " + rejected.path.string() + ": " + rejected.reason;
      throw EngineryError("engine " + target.key.str() + " is not registered" + reasons, "rank worker");
    }
    EngineSpec engine_spec;
    engine_spec.store_file = spec.at("store_file").get<std::string>();
    engine_spec.rank = rank;
    engine_spec.world_size = world_size;
    auto engine = make_engine(target, engine_spec);
    if (engine->get_data_parallel_size() != world_size || engine->get_data_parallel_rank() != rank) {
      throw EngineryError("data-parallel rank/size " + std::to_string(engine->get_data_parallel_rank()) + "/" +
                              std::to_string(engine->get_data_parallel_size()) + ", expected " +
                              std::to_string(rank) + "/" + std::to_string(world_size),
                          "rank worker");
    }
    const ParamList result = parity_run(*engine, target, rank, world_size);
    if (rank == 0) {
      std::vector<torch::Tensor> tensors;
      std::ofstream names(spec.at("output").get<std::string>() + ".names");
      for (const auto& [name, tensor] : result) {
        names << name << "\n";
        tensors.push_back(tensor);
      }
      torch::save(tensors, spec.at("output").get<std::string>());
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << ": " << e.what() << std::endl;
    return 1;
  }
}

std::vector<RankResult> spawn_ranks(const std::vector<std::string>& argv, int world_size, double timeout_s,
                                    const std::string& log_prefix) {
  std::vector<RankResult> results(world_size);
  std::vector<pid_t> pids(world_size, -1);
  std::vector<std::string> logs(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    results[rank].rank = rank;
    logs[rank] = log_prefix + ".rank" + std::to_string(rank) + ".log";
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string key = entry.substr(0, entry.find('='));
      if (key == "RANK" || key == "WORLD_SIZE" || key == "LOCAL_RANK" || key == "LOCAL_WORLD_SIZE") continue;
      env_strings.push_back(entry);
    }
    env_strings.push_back("RANK=" + std::to_string(rank));
    env_strings.push_back("LOCAL_RANK=" + std::to_string(rank));
    env_strings.push_back("WORLD_SIZE=" + std::to_string(world_size));
    env_strings.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world_size));
    std::vector<char*> envp, args;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto& s : argv_copy) args.push_back(s.data());
    args.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, logs[rank].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    const int rc = posix_spawn(&pids[rank], args[0], &actions, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      results[rank].log = std::string("posix_spawn failed: ") + std::strerror(rc);
      pids[rank] = -1;
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int running = 0;
  for (pid_t pid : pids) running += pid > 0;
  while (running > 0) {
    for (int rank = 0; rank < world_size; ++rank) {
      if (pids[rank] <= 0) continue;
      int status = 0;
      if (waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        results[rank].exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pids[rank] = -1;
        --running;
      }
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int rank = 0; rank < world_size; ++rank) {
        if (pids[rank] > 0) {
          kill(pids[rank], SIGKILL);
          waitpid(pids[rank], nullptr, 0);
          pids[rank] = -1;
          results[rank].log = "killed after " + std::to_string(timeout_s) + " s\n";
        }
      }
      break;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int rank = 0; rank < world_size; ++rank) results[rank].log += read_text(logs[rank]);
  return results;
}

}  // namespace conformance
}  // namespace enginery
