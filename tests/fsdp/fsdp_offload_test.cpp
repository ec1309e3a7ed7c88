// BaseEngine::to (docs/ARCHITECTURE.md, "The contract") on CPU over real Gloo ranks. On a CPU engine to(cpu) still
// copies every moved tensor into fresh storage, so the mechanics a GPU offload relies on are exercised here: each
// tensor object the units and AdamW share is re-pointed at its copy (the optimizer sees the new storage, the old
// one is released), and a step after the round trip is bitwise equal to the step of an engine that never moved.
// The GPU side (memory freed and regained, a step while offloaded refused) is fsdp_offload_gpu_test.cpp.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "";
}

// Every tensor to() moves, with the storage it has now (holding a storage handle keeps it alive: use_count 1 after
// the move means nothing else references it any more).
struct Snapshot {
  std::vector<torch::Tensor> values;
  std::vector<c10::Storage> storages;
  std::vector<const void*> data;
};

std::vector<torch::Tensor> moved_tensors(fsdp::FSDPEngine& engine) {
  std::vector<torch::Tensor> out;
  for (auto& u : engine.fsdp_module()->units()) {
    out.push_back(u.shard());
    out.push_back(u.shard_grad_unsettled());
  }
  for (auto& t : engine.optimizer()->exp_avg()) out.push_back(t);
  for (auto& t : engine.optimizer()->exp_avg_sq()) out.push_back(t);
  return out;
}

Snapshot snapshot(fsdp::FSDPEngine& engine) {
  Snapshot s;
  for (const auto& t : moved_tensors(engine)) {
    s.values.push_back(t.clone());
    s.storages.push_back(t.storage());
    s.data.push_back(t.data_ptr());
  }
  return s;
}

void expect_moved(fsdp::FSDPEngine& engine, const Snapshot& before) {
  const auto now = moved_tensors(engine);
  ASSERT_EQ(now.size(), before.values.size());
  for (size_t i = 0; i < now.size(); ++i) {
    EXPECT_TRUE(torch::equal(now[i], before.values[i])) << "tensor " << i << " changed value";
    EXPECT_NE(now[i].data_ptr(), before.data[i]) << "tensor " << i << " was not copied into fresh storage";
    EXPECT_EQ(before.storages[i].use_count(), 1) << "tensor " << i << ": the old storage is still referenced";
  }
  // AdamW holds the units' own tensor objects: it must see the moved storage without being rebuilt.
  auto& units = engine.fsdp_module()->units();
  for (size_t i = 0; i < units.size(); ++i) {
    EXPECT_EQ(engine.optimizer()->params()[i].data_ptr(), units[i].shard().data_ptr()) << "unit " << i;
    EXPECT_TRUE(engine.optimizer()->grads()[i].is_same(units[i].shard_grad_unsettled())) << "unit " << i;
  }
}

void expect_same_output(const BatchOutput& got, const BatchOutput& want, const std::string& what) {
  EXPECT_EQ(got.loss.item<double>(), want.loss.item<double>()) << what << ": loss";
  EXPECT_EQ(got.grad_norm.item<double>(), want.grad_norm.item<double>()) << what << ": grad norm";
  EXPECT_EQ(got.lr, want.lr) << what << ": lr";
}

void expect_same_params(BaseEngine& got, BaseEngine& want, const std::string& what) {
  const auto a = engine_params(got), b = engine_params(want);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << what << ": " << name;
}

// Two engines of one configuration on 2 ranks; `moved` makes round trips, `stayed` never does.
void round_trip_on_two_ranks(const std::string& strategy) {
  testing::run_ranks(2, [strategy](const testing::RankContext& ctx) {
    auto args = make_args(strategy, "bf16", ctx.rank, 2, ctx.group, ctx.store);
    fsdp::FSDPEngine moved(args, tiny_builder(TinyConfig{}));
    fsdp::FSDPEngine stayed(args, tiny_builder(TinyConfig{}));
    moved.initialize();
    stayed.initialize();
    auto batch = [&](uint64_t seed) { return rank_slice(make_batch(4, 8, 64, seed), ctx.rank, 2); };
    expect_same_output(train_batch(moved, batch(1), sft_loss), train_batch(stayed, batch(1), sft_loss), "step 1");

    Snapshot before = snapshot(moved);
    moved.to(torch::kCPU);
    expect_moved(moved, before);
    EXPECT_FALSE(moved.offloaded()) << "a CPU engine is home on the CPU";
    before = snapshot(moved);
    moved.to(torch::Device(torch::kCPU));
    expect_moved(moved, before);
    expect_same_output(train_batch(moved, batch(2), sft_loss), train_batch(stayed, batch(2), sft_loss),
                       "the step after a round trip");
    expect_same_params(moved, stayed, "after a round trip");

    // Parts one at a time, and a shard gradient released by zero_grad (its zero still pending) travelling too.
    moved.optimizer_zero_grad();
    stayed.optimizer_zero_grad();
    moved.to(torch::kCPU, /*model=*/false, /*optimizer=*/true, /*grad=*/false);
    moved.to(torch::kCPU, /*model=*/false, /*optimizer=*/false, /*grad=*/true);
    moved.to(torch::kCPU, /*model=*/true, /*optimizer=*/false, /*grad=*/false);
    forward_backward_batch(moved, batch(3), sft_loss, false);
    forward_backward_batch(stayed, batch(3), sft_loss, false);
    EXPECT_EQ(moved.optimizer_step().item<double>(), stayed.optimizer_step().item<double>()) << "grad norm";
    expect_same_params(moved, stayed, "after a part-by-part round trip with a pending zero");
  });
}

TEST(FsdpOffload, RoundTripKeepsTheNextStepBitwiseFsdp) { round_trip_on_two_ranks("fsdp"); }
TEST(FsdpOffload, RoundTripKeepsTheNextStepBitwiseFsdp2) { round_trip_on_two_ranks("fsdp2"); }

TEST(FsdpOffload, CpuEngineRefusesCudaAndAnUninitializedEngineRefuses) {
  fsdp::FSDPEngine engine(make_args("fsdp2", "fp32"), tiny_builder(TinyConfig{}));
  EXPECT_NE(error_of([&] { engine.to(torch::kCPU); }).find("to() before initialize()"), std::string::npos);
  engine.initialize();
  const std::string error = error_of([&] { engine.to(torch::Device(torch::kCUDA, 0)); });
  EXPECT_NE(error.find("computes on cpu and cannot move its state to cuda:0"), std::string::npos) << error;
  EXPECT_NE(error.find("(allowed: cpu)"), std::string::npos) << error;
  EXPECT_FALSE(engine.offloaded());
}

// An engine that keeps BaseEngine's move_state (StubEngine): BaseEngine::to refuses it by name.
TEST(FsdpOffload, AnEngineWithoutOffloadRefusesByName) {
  StubEngine engine("plain");
  const std::string error = error_of([&] { engine.to(torch::kCPU); });
  EXPECT_NE(error.find("engine plain (language_model, cpu) does not implement to(cpu)"), std::string::npos) << error;
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
