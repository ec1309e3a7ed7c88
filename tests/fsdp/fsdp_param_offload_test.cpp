// engine.param_offload / engine.optimizer_offload on CPU over real Gloo ranks (docs/ARCHITECTURE.md, "The contract",
// offload while computing). A CPU engine keeps its state in host memory anyway, but the offload code runs all the same
// with plain copies in place of uploads and downloads: every unshard takes a fresh copy of its master, every reduced
// gradient is copied into the host buffer after its norm is taken, and the optimizer updates staged copies shard by
// shard and writes them back. The same operations run on the same values in the same order as without offload, so the
// results are expected bitwise equal (not merely within rounding): loss, grad norm, parameters and moments, over three
// steps with two micro-batches each, with and without the grad scaler (including a skipped step), after a checkpoint
// round trip and after to(). The GPU side is fsdp_param_offload_gpu_test.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "engine_driver/config_checks.h"
#include "host_api/error.h"
#include "plugin/veomni/veomni_engine.h"
#include "tests/fsdp/checkpoint_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

struct Offload {
  bool params = false, optimizer = false;
  std::string name() const {
    return std::string(params ? "param_offload" : "") + (params && optimizer ? "+" : "") +
           (optimizer ? "optimizer_offload" : "") + (!params && !optimizer ? "resident" : "");
  }
};
const Offload kResident{false, false};
const std::vector<Offload> kOffloads = {{true, false}, {false, true}, {true, true}};

EngineArgs offload_args(const testing::RankContext& ctx, const std::string& strategy, Offload offload,
                        bool scaler) {
  auto args = make_args(strategy, scaler ? "fp32" : "bf16", ctx.rank, ctx.world_size, ctx.group, ctx.store);
  args.engine.param_offload = offload.params;
  args.engine.optimizer_offload = offload.optimizer;
  if (scaler) {
    args.engine.grad_scaler.enabled = ScalerMode::kAlways;
    args.engine.grad_scaler.init_scale = 1024.0;
    args.engine.grad_scaler.growth_interval = 2;  // the scale grows within the test
  }
  return args;
}

std::unique_ptr<fsdp::FSDPEngine> make_engine(const EngineArgs& args) {
  auto engine = std::make_unique<fsdp::FSDPEngine>(args, tiny_builder(TinyConfig{}));
  engine->initialize();
  return engine;
}

// 8 rows: 4 per rank, two micro-batches of 2 (gradients accumulate unreduced across the first).
Batch step_batch(int rank, uint64_t seed) { return rank_slice(make_batch(8, 8, 64, seed), rank, 2); }

// Step `poisoned` has a non-finite loss on rank 1 only: with the scaler every rank must skip it alike.
LossFn loss_for_step(int rank, int step, int poisoned) {
  if (step != poisoned || rank != 1) return sft_loss;
  return [](const ModelOutput& out, const Batch& mb, const LossContext& ctx) {
    LossResult r = sft_loss(out, mb, ctx);
    r.loss = r.loss * std::numeric_limits<float>::infinity();
    return r;
  };
}

void expect_same_step(const BatchOutput& got, const BatchOutput& want, const std::string& what) {
  if (std::isfinite(want.loss.item<double>())) {
    EXPECT_EQ(got.loss.item<double>(), want.loss.item<double>()) << what << ": loss";
  }
  const double a = got.grad_norm.item<double>(), b = want.grad_norm.item<double>();
  if (std::isfinite(b)) {
    EXPECT_EQ(a, b) << what << ": grad norm";
  } else {
    EXPECT_FALSE(std::isfinite(a)) << what << ": grad norm " << a << " where the resident engine's is " << b;
  }
}

// With the masters on the host and bf16 compute, a streamed step leaves each unit a fresh bf16 copy of its master
// (what the next unshard uploads): exactly the master's cast. fp32 compute keeps none.
void expect_compute_copies_follow(fsdp::FSDPEngine& engine, Offload offload, bool fp32, const std::string& what) {
  for (const fsdp::FsdpUnit& u : engine.fsdp_module()->units()) {
    EXPECT_EQ(u.compute_copy().defined(), offload.params && !fp32) << what << ", " << u.name();
    EXPECT_EQ(u.compute_copy_fresh(), offload.params && !fp32) << what << ", " << u.name();
    if (u.compute_copy_fresh()) {
      EXPECT_TRUE(torch::equal(u.compute_copy(), u.shard().to(torch::kBFloat16))) << what << ", " << u.name();
    }
  }
}

void expect_host_resident(fsdp::FSDPEngine& engine, Offload offload) {
  for (auto& u : engine.fsdp_module()->units()) EXPECT_EQ(u.master_on_host(), offload.params) << u.name();
  EXPECT_TRUE(engine.optimizer()->streamed());
}

// Three steps of every offload combination against a resident engine, each step compared bitwise.
void offloaded_equals_resident(const std::string& strategy, bool scaler) {
  testing::run_ranks(2, [strategy, scaler](const testing::RankContext& ctx) {
    auto resident = make_engine(offload_args(ctx, strategy, kResident, scaler));
    std::vector<std::unique_ptr<fsdp::FSDPEngine>> offloaded;
    for (const auto& o : kOffloads) {
      offloaded.push_back(make_engine(offload_args(ctx, strategy, o, scaler)));
      expect_host_resident(*offloaded.back(), o);
    }
    const int poisoned = scaler ? 1 : -1;
    for (int step = 0; step < 3; ++step) {
      const Batch batch = step_batch(ctx.rank, 10 + step);
      const LossFn loss = loss_for_step(ctx.rank, step, poisoned);
      const BatchOutput want = train_batch(*resident, batch, loss);
      for (size_t k = 0; k < offloaded.size(); ++k) {
        const std::string what = kOffloads[k].name() + ", step " + std::to_string(step);
        expect_same_step(train_batch(*offloaded[k], batch, loss), want, what);
        expect_compute_copies_follow(*offloaded[k], kOffloads[k], scaler, what);
        if (scaler) {
          EXPECT_EQ(offloaded[k]->grad_scaler()->current_scale(), resident->grad_scaler()->current_scale()) << what;
          EXPECT_EQ(offloaded[k]->grad_scaler()->last_step_skipped(), step == poisoned) << what;
        }
      }
    }
    const TensorMap want = full_state(*resident);
    for (size_t k = 0; k < offloaded.size(); ++k) {
      expect_bitwise_equal(full_state(*offloaded[k]), want, kOffloads[k].name() + " after 3 steps");
    }
  });
}

TEST(FsdpParamOffload, OffloadedStepsEqualResidentBitwiseFsdp) { offloaded_equals_resident("fsdp", false); }
TEST(FsdpParamOffload, OffloadedStepsEqualResidentBitwiseFsdp2) { offloaded_equals_resident("fsdp2", false); }
TEST(FsdpParamOffload, ScalerWithSkippedStepEqualsResidentBitwiseFsdp) { offloaded_equals_resident("fsdp", true); }
TEST(FsdpParamOffload, ScalerWithSkippedStepEqualsResidentBitwiseFsdp2) { offloaded_equals_resident("fsdp2", true); }

// A master written between steps (a checkpoint load, VeOmni's rounding, anyone holding FsdpUnit::shard()) reaches
// the next forward: the write makes the unit's bf16 copy stale, so that unshard uploads the fp32 master instead of
// the copy, and writes the copy again. A stale copy used anyway would give the old parameters' loss.
TEST(FsdpParamOffload, AMasterWrittenBetweenStepsReachesTheNextForward) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    const Offload both{true, true};
    auto resident = make_engine(offload_args(ctx, "fsdp2", kResident, false));
    auto offloaded = make_engine(offload_args(ctx, "fsdp2", both, false));
    expect_same_step(train_batch(*offloaded, step_batch(ctx.rank, 1), sft_loss),
                     train_batch(*resident, step_batch(ctx.rank, 1), sft_loss), "step 1");
    for (auto* engine : {resident.get(), offloaded.get()}) {
      for (auto& u : engine->fsdp_module()->units()) u.shard().mul_(0.75);
    }
    for (const fsdp::FsdpUnit& u : offloaded->fsdp_module()->units()) EXPECT_FALSE(u.compute_copy_fresh()) << u.name();
    expect_same_step(train_batch(*offloaded, step_batch(ctx.rank, 2), sft_loss),
                     train_batch(*resident, step_batch(ctx.rank, 2), sft_loss), "after the masters were scaled");
    expect_compute_copies_follow(*offloaded, both, false, "after the step that followed the write");
    const TensorMap want = full_state(*resident);
    expect_bitwise_equal(full_state(*offloaded), want, "after the write and a step");
  });
}

// A checkpoint of an offloaded engine continues bitwise in an offloaded engine, a param-offload-only one and a
// resident one: the files do not depend on where the state lived.
TEST(FsdpParamOffload, CheckpointRoundTripWithOffloadedState) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    const Offload both{true, true};
    auto saver = make_engine(offload_args(ctx, "fsdp2", both, false));
    train_batch(*saver, step_batch(ctx.rank, 1), sft_loss);
    train_batch(*saver, step_batch(ctx.rank, 2), sft_loss);
    const std::string dir = ctx.shared_dir + "/offloaded_ckpt";
    saver->save_checkpoint(dir, 2, 0);
    const BatchOutput want = train_batch(*saver, step_batch(ctx.rank, 3), sft_loss);
    const TensorMap want_state = full_state(*saver);
    for (const Offload& o : {both, kResident, Offload{true, false}}) {
      auto loader = make_engine(offload_args(ctx, "fsdp2", o, false));
      loader->load_checkpoint(dir);
      expect_same_step(train_batch(*loader, step_batch(ctx.rank, 3), sft_loss), want, "loaded into " + o.name());
      expect_bitwise_equal(full_state(*loader), want_state, "loaded into " + o.name());
    }
  });
}

// to() on an offloaded engine: what offload keeps on the host stays there (nothing is marked away), a part that is
// still resident (AdamW's moments with param_offload alone) travels as before, and the next step is unchanged.
TEST(FsdpParamOffload, ToCpuOnAnOffloadedEngineKeepsTheNextStepBitwise) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    for (const Offload& o : kOffloads) {
      auto moved = make_engine(offload_args(ctx, "fsdp", o, false));
      auto stayed = make_engine(offload_args(ctx, "fsdp", o, false));
      expect_same_step(train_batch(*moved, step_batch(ctx.rank, 1), sft_loss),
                       train_batch(*stayed, step_batch(ctx.rank, 1), sft_loss), o.name() + ", step 1");
      const void* master = moved->fsdp_module()->units()[0].shard().data_ptr();
      moved->to(torch::kCPU);
      EXPECT_FALSE(moved->offloaded()) << o.name();
      if (o.params) {
        EXPECT_EQ(moved->fsdp_module()->units()[0].shard().data_ptr(), master) << o.name() << ": the master moved";
      }
      moved->to(torch::kCPU);
      expect_same_step(train_batch(*moved, step_batch(ctx.rank, 2), sft_loss),
                       train_batch(*stayed, step_batch(ctx.rank, 2), sft_loss), o.name() + ", after to()");
      const TensorMap got = full_state(*moved);  // collective: one at a time, in the same order on every rank
      expect_bitwise_equal(got, full_state(*stayed), o.name() + " after to()");
    }
  });
}

// offload_step = host: one fused pass over the host tensors, the same math arranged differently, so the steps agree
// to fp32 rounding (the first loss and grad norm bitwise: nothing has been updated yet); a bad value, or a host step
// without both keys, is refused at construction naming the key.
TEST(FsdpParamOffload, HostOptimizerStepEqualsResidentAndBadSettingsAreRefused) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    // fp32 compute, so that a rounding difference in an update is not amplified by a bf16 cast in the next forward.
    auto resident_args = offload_args(ctx, "fsdp", kResident, false);
    resident_args.engine.mixed_precision.param_dtype = c10::kFloat;
    auto resident = make_engine(resident_args);
    auto args = offload_args(ctx, "fsdp", Offload{true, true}, false);
    args.engine.mixed_precision.param_dtype = c10::kFloat;
    args.engine.backend_options["offload_step"] = std::string("host");
    auto host = make_engine(args);
    for (int step = 0; step < 3; ++step) {
      const Batch batch = step_batch(ctx.rank, 40 + step);
      const BatchOutput want = train_batch(*resident, batch, sft_loss);
      const BatchOutput got = train_batch(*host, batch, sft_loss);
      if (step == 0) expect_same_step(got, want, "host step 0");
      const double loss = want.loss.item<double>(), norm = want.grad_norm.item<double>();
      EXPECT_NEAR(got.loss.item<double>(), loss, 1e-4 * std::abs(loss)) << "host step " << step;
      EXPECT_NEAR(got.grad_norm.item<double>(), norm, 1e-4 * norm) << "host step " << step;
    }
    const TensorMap want = full_state(*resident);
    expect_near(full_state(*host), want, 1e-5, "host step after 3 steps");
    // With bf16 compute the host step writes the masters but not their bf16 copies: it must leave them stale, so
    // the next unshard uploads the updated master rather than the copy of the one before the step.
    auto bf16_args = offload_args(ctx, "fsdp", Offload{true, true}, false);
    bf16_args.engine.backend_options["offload_step"] = std::string("host");
    auto bf16_host = make_engine(bf16_args);
    for (int step = 0; step < 2; ++step) {
      train_batch(*bf16_host, step_batch(ctx.rank, 50 + step), sft_loss);
      for (const fsdp::FsdpUnit& u : bf16_host->fsdp_module()->units()) {
        ASSERT_TRUE(u.compute_copy().defined()) << u.name();
        EXPECT_FALSE(u.compute_copy_fresh()) << "bf16 host step " << step << ", " << u.name();
      }
    }
  });
  auto message = [](const std::function<void(EngineArgs&)>& edit) -> std::string {
    EngineArgs args = make_args("fsdp2", "bf16");
    args.engine.param_offload = true;
    args.engine.optimizer_offload = true;
    edit(args);
    try {
      fsdp::FSDPEngine engine(args, tiny_builder(TinyConfig{}));
    } catch (const EngineryError& e) {
      return e.what();
    }
    return "";
  };
  const std::string bad = message([](EngineArgs& a) { a.engine.backend_options["offload_step"] = std::string("gpu"); });
  EXPECT_NE(bad.find("engine.fsdp2.offload_step: unknown value 'gpu' (allowed: device, host)"), std::string::npos)
      << bad;
  const std::string half = message([](EngineArgs& a) {
    a.engine.backend_options["offload_step"] = std::string("host");
    a.engine.optimizer_offload = false;
  });
  EXPECT_NE(half.find("engine.fsdp2.offload_step: a host optimizer step needs"), std::string::npos) << half;
  EXPECT_EQ(message([](EngineArgs& a) { a.engine.backend_options["offload_step"] = std::string("device"); }), "");
}

// Declared for every backend on both devices, so the registry admits them (verl sets them on any device).
TEST(FsdpParamOffload, KeysAreDeclaredForFsdpFsdp2AndVeomni) {
  EngineArgs args = make_args("fsdp2", "bf16");
  args.engine.param_offload = true;
  args.engine.optimizer_offload = true;
  for (const char* device : {"cpu", "cuda"}) {
    EXPECT_NO_THROW(check_config_supported(fsdp::FSDPEngine::config_support(device), args, "fsdp2")) << device;
    EXPECT_NO_THROW(check_config_supported(veomni::VeOmniEngine::config_support(device), args, "veomni")) << device;
  }
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
