// World size 2 equals world size 1: two real rank processes over Gloo (NCCL on CUDA) train a fixed batch split
// between them; their parameters and grad norms must match a single-rank run of the whole batch.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "conformance/data.h"
#include "conformance/engine_setup.h"
#include "conformance/rank_worker.h"
#include "conformance/target.h"
#include "support/torch_compat.h"

namespace enginery {
namespace conformance {
namespace {

constexpr int kWorldSize = 2;

std::string multirank_skip(const Target& target) {
  std::string missing = missing_capability(target, {target.precision_capability("fp32"), "multi-rank"});
  if (!missing.empty()) return missing;
  if (target.self_command.empty()) return "this front end cannot start rank workers";
  if (target.key.device == "cpu" && !compat::has_gloo()) return "this build has no Gloo (CPU process group)";
  if (target.key.device == "cuda") {
    if (!compat::has_nccl()) return "this build has no NCCL";
    if (torch::cuda::device_count() < kWorldSize) return "needs 2 CUDA devices";
  }
  return "";
}

ParamList load_result(const std::string& file) {
  std::vector<torch::Tensor> tensors;
  torch::load(tensors, file);
  std::ifstream names(file + ".names");
  ParamList result;
  std::string name;
  for (size_t i = 0; i < tensors.size() && std::getline(names, name); ++i) result.emplace_back(name, tensors[i]);
  return result;
}

void check_world_size_parity(const Target& target) {
  const std::string base = fresh_scratch_path("ws2");
  nlohmann::json spec = {{"plugin_dir", target.plugin_dir.string()}, {"model_type", target.key.model_type},
                         {"backend", target.key.backend},            {"device", target.key.device},
                         {"model_path", target.model_path},          {"store_file", base + ".store"},
                         {"output", base + ".pt"}};
  std::ofstream(base + ".json") << spec.dump();
  std::vector<std::string> argv = target.self_command;
  argv.push_back(kRankWorkerFlag);
  argv.push_back(base + ".json");
  const SpawnResult ranks = spawn_rank_workers(argv, kWorldSize, 180.0, base);

  // The single-rank reference (after the ranks have finished); its error is reported after theirs.
  ParamList single;
  std::string single_error;
  try {
    auto engine = make_engine(target, EngineSpec{});
    single = parity_run(*engine, target, 0, 1);
  } catch (const std::exception& e) {
    single_error = e.what();
  }

  bool ranks_ok = true;
  for (const RankExit& rank : ranks.ranks) {
    if (!rank.ok()) {
      ranks_ok = false;
      ADD_FAILURE() << "rank " << rank.rank << " of " << kWorldSize << " " << rank.describe() << ":\n"
                    << read_log(base + ".rank" + std::to_string(rank.rank) + ".log");
    }
  }
  ASSERT_EQ(single_error, "") << "the world-size-1 reference run failed";
  if (!ranks_ok) return;
  const ParamList multi = load_result(base + ".pt");
  ASSERT_EQ(multi.size(), single.size()) << "rank 0 wrote " << multi.size() << " entries";
  // fp32 with a different summation order (two ranks, two all-reduces): equal up to rounding, not bitwise.
  EXPECT_EQ(diff_params(multi, single, 2e-6, 1e-4), "") << "world size 2 differs from world size 1";
}

}  // namespace

void add_multirank_checks(std::vector<Check>& checks) {
  checks.push_back({"world_size_2_equals_1",
                    "2 real ranks on halves of a batch end where 1 rank on the whole batch does (params, grad norms)",
                    multirank_skip, check_world_size_parity});
}

}  // namespace conformance
}  // namespace enginery
