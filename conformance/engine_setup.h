#pragma once
// Building engines through the registry only, the way a host does: EngineArgs from a small spec, a world group of
// size 1 over a FileStore in the suite's scratch directory.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "conformance/target.h"
#include "host_api/base_engine.h"

namespace enginery {
namespace conformance {

struct EngineSpec {
  std::string param_dtype = "fp32";            // any PrecisionType spelling; typed in engine_args()
  double lr = 1e-3;
  double clip_grad = 1.0;
  int64_t micro_batch_size = 2;
  ScalerMode grad_scaler = ScalerMode::kAuto;  // GradScalerConfig::enabled
  std::string lr_scheduler = "constant";
  int64_t lr_warmup_steps = -1;
  int64_t total_training_steps = 20;
  std::function<void(EngineArgs&)> adjust;     // last word on the args (bad values for the rejection check)
  // The world: size 1 over a fresh FileStore unless a rank worker names the shared store file.
  std::string store_file;
  int64_t rank = 0;
  int64_t world_size = 1;
};

// A process-wide temporary directory, removed at exit.
const std::string& scratch_dir();
std::string fresh_scratch_path(const std::string& stem);

EngineArgs engine_args(const Target& target, const EngineSpec& spec);

// registry.create() only: the engine is not initialized.
std::shared_ptr<BaseEngine> create_engine(const Target& target, const EngineSpec& spec);
std::shared_ptr<BaseEngine> create_engine(const Target& target, EngineArgs args);
// create() + initialize().
std::shared_ptr<BaseEngine> make_engine(const Target& target, const EngineSpec& spec);

// The world group a host builds for one rank: Gloo on CPU, NCCL on CUDA, null where the build has neither.
void attach_world_group(EngineArgs& args, const std::string& store_file, int64_t rank, int64_t world_size);

}  // namespace conformance
}  // namespace enginery
