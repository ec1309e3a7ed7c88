#include "conformance/engine_setup.h"

#include <stdlib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "host_api/error.h"
#include "engine_driver/precision.h"
#include "launch/world_group.h"
#include "support/torch_compat.h"

namespace enginery {
namespace conformance {
namespace fs = std::filesystem;

namespace {
std::string& scratch_storage() {
  static std::string dir;
  return dir;
}
void remove_scratch() {
  std::error_code ignored;
  if (!scratch_storage().empty()) enginery::compat::remove_all(scratch_storage(), ignored);
}
}  // namespace

const std::string& scratch_dir() {
  static const std::string& dir = [] () -> const std::string& {
    std::string pattern = (fs::temp_directory_path() / "enginery-conformance-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw EngineryError("cannot create a scratch directory", pattern, "a writable TMPDIR");
    }
    scratch_storage() = pattern;
    std::atexit(remove_scratch);
    return scratch_storage();
  }();
  return dir;
}

std::string fresh_scratch_path(const std::string& stem) {
  static std::atomic<int64_t> counter{0};
  return (fs::path(scratch_dir()) / (stem + "-" + std::to_string(counter++))).string();
}

void attach_world_group(EngineArgs& args, const std::string& store_file, int64_t rank, int64_t world_size) {
  args.rank = rank;
  args.local_rank = rank;  // the suite's ranks all run on this host
  args.world_size = world_size;
  args.store = make_file_store(store_file, world_size);
  if ((args.device == "cuda" || args.device == "cpu") && has_world_group(args.device)) {
    args.world_group = make_world_group(args.store, rank, world_size, args.device);
  } else if (world_size > 1) {
    throw EngineryError("no process group for device " + args.device + " in this build", "conformance",
                        "Gloo on cpu, NCCL on cuda");
  }
}

EngineArgs engine_args(const Target& target, const EngineSpec& spec) {
  EngineArgs args;
  args.model_type = target.key.model_type;
  args.device = target.key.device;
  args.model.path = target.model_path;
  args.engine.strategy = target.key.backend;
  args.engine.micro_batch_size_per_gpu = spec.micro_batch_size;
  args.engine.mixed_precision.param_dtype = PrecisionType::to_dtype(spec.param_dtype);
  args.engine.grad_scaler.enabled = spec.grad_scaler;
  args.optim.lr = spec.lr;
  args.optim.clip_grad = spec.clip_grad;
  args.optim.lr_scheduler_type = spec.lr_scheduler;
  args.optim.lr_warmup_steps = spec.lr_warmup_steps;
  args.optim.total_training_steps = spec.total_training_steps;
  attach_world_group(args, spec.store_file.empty() ? fresh_scratch_path("store") : spec.store_file, spec.rank,
                     spec.world_size);
  if (spec.adjust) spec.adjust(args);
  return args;
}

std::shared_ptr<BaseEngine> create_engine(const Target& target, EngineArgs args) {
  return target.registry->create(target.key, args);
}

std::shared_ptr<BaseEngine> create_engine(const Target& target, const EngineSpec& spec) {
  return create_engine(target, engine_args(target, spec));
}

std::shared_ptr<BaseEngine> make_engine(const Target& target, const EngineSpec& spec) {
  auto engine = create_engine(target, spec);
  engine->initialize();
  return engine;
}

}  // namespace conformance
}  // namespace enginery
