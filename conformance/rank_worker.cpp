#include "conformance/rank_worker.h"

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "conformance/engine_setup.h"
#include "host_api/error.h"
#include "launch/rank_env.h"
#include "registry/plugin_loader.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace conformance {

ParamList parity_run(BaseEngine& engine, const Target& target, int64_t rank, int64_t world_size) {
  const Batch batch = make_batch(target, 4, 16, 4242);
  const int64_t rows = batch.size() / world_size;
  const Batch local = batch.slice(rank * rows, (rank + 1) * rows);
  const LossFn loss = token_mean_loss(target);
  std::vector<double> norms;
  for (int step = 0; step < kParitySteps; ++step) norms.push_back(train_batch(engine, local, loss).grad_norm.item<double>());
  ParamList result = read_params(engine);
  for (size_t i = 0; i < norms.size(); ++i) {
    result.emplace_back("grad_norm." + std::to_string(i), torch::tensor({norms[i]}, torch::kDouble));
  }
  return result;
}

namespace {

RankEnv worker_env() {
  const std::optional<RankEnv> env = rank_env_from_environment();
  if (!env) throw EngineryError("RANK is not set", "rank worker");
  return *env;
}

}  // namespace

int run_rank_worker(const std::string& spec_file) {
  int64_t rank = -1;
  try {
    const RankEnv env = worker_env();
    rank = env.rank;
    const int64_t world_size = env.world_size;
    torch::set_num_threads(1);  // the ranks share the host's cores
    std::ifstream spec_text(spec_file);
    const auto spec = nlohmann::json::parse(spec_text);
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

SpawnResult spawn_rank_workers(const std::vector<std::string>& argv, int world_size, double timeout_s,
                               const std::string& log_prefix) {
  SpawnOptions spawn;
  spawn.nproc = world_size;
  spawn.argv = argv;
  spawn.rank_env = [world_size](int rank) {
    RankEnv env;
    env.rank = rank;
    env.world_size = world_size;
    env.local_rank = rank;  // the suite's ranks all run on this host
    env.local_world_size = world_size;
    return rank_env_variables(env);
  };
  for (int rank = 0; rank < world_size; ++rank) {
    spawn.log_files.push_back(log_prefix + ".rank" + std::to_string(rank) + ".log");
  }
  spawn.timeout_s = timeout_s;
  return spawn_ranks(spawn);
}

}  // namespace conformance
}  // namespace enginery
