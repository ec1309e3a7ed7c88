// BaseEngine::to on CUDA (label gpu; skips without CUDA or NCCL): to(cpu) frees the GPU memory of the master
// shards, AdamW state and shard gradients (they land in pinned host memory), a step while offloaded is refused,
// to(cuda) brings back exactly as much, and the next step is bitwise equal to an engine that never moved. Prints
// the seconds each way and the GB/s of the copies (the lead runs it on the H200; docs/BENCHMARKS.md).
// ENGINERY_OFFLOAD_MODEL=<HF directory or builtin:...> measures a real model instead of the synthetic one.
// ParamOffloadGpuTest: engine.param_offload / optimizer_offload on CUDA in bf16 against a resident engine (same
// steps within fp32 rounding, see there) and the GPU memory held between steps without the offloaded state.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include "host_api/error.h"
#include "engine_driver/mode_offload.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "engine_driver/step_loop.h"
#include "engine_driver/mode_guard.h"

namespace enginery {
namespace fsdp_test {
namespace {

bool have_gpu() { return torch::cuda::is_available() && compat::has_nccl(); }

EngineArgs cuda_args(const std::string& strategy) {
  static int counter = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("enginery_offload_store_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove(path);
  auto store = c10::make_intrusive<c10d::FileStore>(path.string(), 1);
  auto args = make_args(strategy, "bf16", 0, 1, compat::make_nccl_group(store, 0, 1), store);
  args.device = "cuda";
  args.local_rank = 0;
  return args;
}

std::unique_ptr<fsdp::FSDPEngine> make_engine(const std::string& strategy, bool param_offload = false,
                                              bool optimizer_offload = false, bool outside_modes = false) {
  auto args = cuda_args(strategy);
  args.engine.param_offload = param_offload;
  args.engine.optimizer_offload = optimizer_offload;
  if (outside_modes) args.engine.backend_options[kOffloadOutsideModes] = true;
  const char* model = std::getenv("ENGINERY_OFFLOAD_MODEL");
  std::unique_ptr<fsdp::FSDPEngine> engine;
  if (model != nullptr && *model != '\0') {
    args.model.path = model;
    engine = std::make_unique<fsdp::FSDPEngine>(args);
  } else {
    TinyConfig big;  // about 50M parameters: large enough that the copies are bandwidth-bound
    big.vocab = 32768;
    big.hidden = 512;
    big.layers = 8;
    engine = std::make_unique<fsdp::FSDPEngine>(args, tiny_builder(big));
  }
  engine->initialize();
  return engine;
}

// Token ids below 64 are valid in every model's vocabulary.
Batch gpu_batch(uint64_t seed) { return make_batch(4, 64, 64, seed); }

int64_t state_bytes(fsdp::FSDPEngine& engine) {
  int64_t bytes = 0;
  for (auto& u : engine.fsdp_module()->units()) {
    bytes += u.shard().nbytes() + u.shard_grad_unsettled().nbytes();
  }
  for (const auto* list : {&engine.optimizer()->exp_avg(), &engine.optimizer()->exp_avg_sq(),
                           &engine.optimizer()->device_steps()}) {
    for (const auto& t : *list) bytes += t.nbytes();
  }
  return bytes;
}

double seconds_of(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class GpuOffloadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuOffloadTest, RoundTripFreesMemoryAndKeepsTheNextStepBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  auto moved = make_engine(GetParam());
  auto stayed = make_engine(GetParam());
  const Batch first = gpu_batch(1), second = gpu_batch(2);
  auto a = train_batch(*moved, first, sft_loss);
  auto b = train_batch(*stayed, first, sft_loss);
  EXPECT_EQ(a.loss.item<double>(), b.loss.item<double>());

  const int64_t bytes = state_bytes(*moved);
  torch::cuda::synchronize();
  const int64_t before = compat::cuda_allocated_bytes(0);
  const double out_s = seconds_of([&] { moved->to(torch::kCPU); });
  const int64_t offloaded = compat::cuda_allocated_bytes(0);
  EXPECT_TRUE(moved->offloaded());
  for (auto& u : moved->fsdp_module()->units()) {
    EXPECT_TRUE(u.shard().is_cpu() && u.shard().is_pinned()) << u.name() << ": master shard not in pinned memory";
  }
  EXPECT_GE(before - offloaded, bytes * 9 / 10) << "to(cpu) freed less GPU memory than the state it moved";

  try {
    train_batch(*moved, second, sft_loss);
    ADD_FAILURE() << "a step while offloaded ran";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("offloaded to cpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("call to(cuda:0) first"), std::string::npos) << e.what();
  }

  const double back_s = seconds_of([&] { moved->to(torch::kCUDA); });
  torch::cuda::synchronize();
  EXPECT_FALSE(moved->offloaded());
  // What left comes back; the refused step in between may leave a few MiB of its own (inputs moved to the device).
  EXPECT_NEAR(static_cast<double>(compat::cuda_allocated_bytes(0)), static_cast<double>(before), 64.0 * (1 << 20))
      << "to(cuda) did not bring back what left";

  a = train_batch(*moved, second, sft_loss);
  b = train_batch(*stayed, second, sft_loss);
  EXPECT_EQ(a.loss.item<double>(), b.loss.item<double>()) << "loss after the round trip";
  EXPECT_EQ(a.grad_norm.item<double>(), b.grad_norm.item<double>()) << "grad norm after the round trip";
  const auto pa = engine_params(*moved), pb = engine_params(*stayed);
  for (const auto& [name, t] : pa) EXPECT_TRUE(torch::equal(t, pb.at(name))) << name;

  const double gb = static_cast<double>(bytes) / 1e9;
  std::cout << "offload " << GetParam() << ": " << gb << " GB of state; GPU allocated " << before / 1e9 << " -> "
            << offloaded / 1e9 << " GB; to(cpu) " << out_s << " s (" << gb / out_s << " GB/s), to(cuda) " << back_s
            << " s (" << gb / back_s << " GB/s)\n";
}

TEST_P(GpuOffloadTest, OptimizerAloneAwayAllowsInferenceButNoStep) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  auto engine = make_engine(GetParam());
  const Batch batch = gpu_batch(3);
  train_batch(*engine, batch, sft_loss);
  engine->to(torch::kCPU, /*model=*/false, /*optimizer=*/true, /*grad=*/false);
  EXPECT_NO_THROW(infer_batch(*engine, batch, sft_loss)) << "the model is home: forward-only passes may run";
  try {
    train_batch(*engine, batch, sft_loss);
    ADD_FAILURE() << "a step with the optimizer state on the CPU ran";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer_step: the engine is offloaded to cpu (optimizer)"),
              std::string::npos)
        << e.what();
  }
  engine->to(torch::kCUDA);
  EXPECT_NO_THROW(train_batch(*engine, batch, sft_loss));
}

// [engine.<backend>] offload_outside_modes: outside the mode guards the GPU holds none of the state; train_mode()
// brings all of it, eval_mode() the master shards only, and the steps are bitwise those of an engine that stays
// (run first and freed, so that its memory is not counted).
TEST_P(GpuOffloadTest, OutsideModesTheGpuHoldsNoState) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  std::vector<BatchOutput> want;
  std::map<std::string, torch::Tensor> want_params;
  {
    auto stayed = make_engine(GetParam());
    for (int step = 0; step < 2; ++step) want.push_back(train_batch(*stayed, gpu_batch(40 + step), sft_loss));
    for (const auto& [name, t] : engine_params(*stayed)) want_params[name] = t.cpu();
  }
  torch::cuda::synchronize();
  compat::cuda_empty_cache();
  const int64_t empty = compat::cuda_allocated_bytes(0);
  auto moving = make_engine(GetParam(), false, false, /*outside_modes=*/true);
  const int64_t after_init = compat::cuda_allocated_bytes(0) - empty;
  try {
    train_batch(*moving, gpu_batch(40), sft_loss);
    ADD_FAILURE() << "a step outside the modes ran";
  } catch (const EngineryError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("or call it inside train_mode() / eval_mode()"), std::string::npos) << message;
  }
  int64_t shard_bytes = 0;
  for (auto& u : moving->fsdp_module()->units()) shard_bytes += u.shard().numel() * 4;
  int64_t in_train = 0, in_eval = 0;
  double train_s = 0, eval_s = 0;
  for (int step = 0; step < 2; ++step) {
    BatchOutput got;
    train_s += seconds_of([&] {
      auto mode = train_mode(*moving);
      got = train_batch(*moving, gpu_batch(40 + step), sft_loss);
      torch::cuda::synchronize();
      in_train = compat::cuda_allocated_bytes(0) - empty;
    });
    EXPECT_EQ(got.loss.item<double>(), want[step].loss.item<double>()) << "step " << step;
    EXPECT_EQ(got.grad_norm.item<double>(), want[step].grad_norm.item<double>()) << "step " << step;
    EXPECT_TRUE(moving->offloaded()) << "the state stayed on the GPU after train_mode()";
    eval_s += seconds_of([&] {
      auto mode = eval_mode(*moving);
      torch::cuda::synchronize();
      in_eval = compat::cuda_allocated_bytes(0) - empty;
    });
  }
  torch::cuda::synchronize();
  const int64_t outside = compat::cuda_allocated_bytes(0) - empty;
  const int64_t state = state_bytes(*moving);
  // What stays allocated outside the modes is what no part holds (buffers, the rotary tables): far below the state.
  EXPECT_LT(after_init, state / 10) << "initialize() left the state on the GPU";
  EXPECT_LT(outside, state / 10) << "the state came back to the GPU outside the modes";
  EXPECT_GE(in_train - outside, state * 9 / 10) << "train_mode() did not bring the whole state";
  EXPECT_GE(in_eval - outside, shard_bytes * 9 / 10) << "eval_mode() did not bring the master shards";
  EXPECT_LT(in_eval - outside, state / 2) << "eval_mode() brought the optimizer state too";
  auto mode = eval_mode(*moving);
  for (const auto& [name, t] : engine_params(*moving)) EXPECT_TRUE(torch::equal(t.cpu(), want_params.at(name))) << name;
  std::cout << "offload_outside_modes " << GetParam() << ": state " << state / 1e9 << " GB; GPU allocated outside "
            << outside / 1e9 << " GB, in eval_mode " << in_eval / 1e9 << " GB, in train_mode (after a step) "
            << in_train / 1e9 << " GB; a train_mode round trip with its step " << train_s / 2
            << " s, an empty eval_mode round trip " << eval_s / 2 << " s\n";
}

INSTANTIATE_TEST_SUITE_P(Strategies, GpuOffloadTest, ::testing::Values("fsdp", "fsdp2"));

double max_abs_diff(BaseEngine& a, BaseEngine& b) {
  const auto pa = engine_params(a), pb = engine_params(b);
  double diff = 0.0;
  for (const auto& [name, t] : pa) {
    diff = std::max(diff, (t.to(torch::kDouble) - pb.at(name).to(torch::kDouble)).abs().max().item<double>());
  }
  return diff;
}

class ParamOffloadGpuTest : public ::testing::TestWithParam<std::string> {};

// The same steps as a resident engine. Not bitwise: at one rank the resident engine keeps exact bf16 shard gradients
// and takes their norms with a bf16 reduction kernel, while the offloaded one downloads fp32 gradients and takes
// fp32 norms, so the clip coefficient may differ in its last bits (the updates use the same fused AdamW kernel,
// shard by shard). The first loss is bitwise (same masters, same gather); later steps agree to fp32 rounding.
TEST_P(ParamOffloadGpuTest, StepsMatchTheResidentEngine) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  const std::vector<std::pair<bool, bool>> combinations = {{true, true}, {true, false}, {false, true}};
  for (const auto& [params, optimizer] : combinations) {
    auto offloaded = make_engine(GetParam(), params, optimizer);
    auto reference = make_engine(GetParam());
    const std::string what = std::string("param_offload=") + (params ? "1" : "0") + " optimizer_offload=" +
                             (optimizer ? "1" : "0");
    for (int step = 0; step < 3; ++step) {
      const Batch batch = gpu_batch(20 + step);
      const auto got = train_batch(*offloaded, batch, sft_loss);
      const auto want = train_batch(*reference, batch, sft_loss);
      const double loss = got.loss.item<double>(), want_loss = want.loss.item<double>();
      if (step == 0) EXPECT_EQ(loss, want_loss) << what << ": first loss";
      EXPECT_NEAR(loss, want_loss, 1e-5 * std::abs(want_loss)) << what << ", step " << step;
      const double norm = got.grad_norm.item<double>(), want_norm = want.grad_norm.item<double>();
      EXPECT_NEAR(norm, want_norm, 1e-5 * want_norm) << what << ", step " << step << ": grad norm";
      // What the next forward uploads: the step wrote each unit's pinned bf16 copy from its updated master.
      for (const fsdp::FsdpUnit& u : offloaded->fsdp_module()->units()) {
        if (!params) break;
        ASSERT_TRUE(u.compute_copy_fresh()) << what << ", " << u.name();
        EXPECT_TRUE(u.compute_copy().is_pinned()) << what << ", " << u.name();
        EXPECT_TRUE(torch::equal(u.compute_copy(), u.shard().to(torch::kBFloat16))) << what << ", " << u.name();
      }
    }
    const double diff = max_abs_diff(*offloaded, *reference);
    EXPECT_LE(diff, 1e-5) << what << ": parameters after 3 steps";
    std::cout << what << ": max |param diff| after 3 steps " << diff << "\n";
  }
}

// Between steps the GPU holds neither the masters, the shard gradients nor AdamW's moments of a fully offloaded
// engine: what it allocates is a small part of that state (buffers, per-shard norms and step counters), while a
// resident engine holds all of it.
TEST_P(ParamOffloadGpuTest, GpuMemoryBetweenStepsExcludesOffloadedState) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device or no NCCL in this build";
  auto held_after_a_step = [&](bool offload, int64_t& state) {
    torch::cuda::synchronize();
    compat::cuda_empty_cache();
    const int64_t before = compat::cuda_allocated_bytes(0);
    auto engine = make_engine(GetParam(), offload, offload);
    train_batch(*engine, gpu_batch(30), sft_loss);
    train_batch(*engine, gpu_batch(31), sft_loss);
    torch::cuda::synchronize();
    state = state_bytes(*engine);
    if (offload) {
      for (auto& u : engine->fsdp_module()->units()) {
        EXPECT_TRUE(u.shard().is_cpu() && u.shard().is_pinned()) << u.name() << ": master not in pinned memory";
        EXPECT_TRUE(u.shard_grad_unsettled().is_cpu()) << u.name() << ": shard gradient not on the host";
      }
      for (const auto& t : engine->optimizer()->exp_avg()) EXPECT_TRUE(t.is_cpu() && t.is_pinned());
    }
    return compat::cuda_allocated_bytes(0) - before;
  };
  int64_t resident_state = 0, offloaded_state = 0;
  const int64_t resident = held_after_a_step(false, resident_state);
  const int64_t offloaded = held_after_a_step(true, offloaded_state);
  std::cout << GetParam() << ": GPU allocated between steps " << resident / 1e9 << " GB resident, " << offloaded / 1e9
            << " GB offloaded (state " << offloaded_state / 1e9 << " GB)\n";
  EXPECT_GE(resident, resident_state * 9 / 10) << "the resident engine should hold its state on the GPU";
  EXPECT_LE(offloaded, offloaded_state / 10) << "the offloaded engine holds state on the GPU between steps";
}

INSTANTIATE_TEST_SUITE_P(Strategies, ParamOffloadGpuTest, ::testing::Values("fsdp", "fsdp2"));

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
