// Units are finished inside backward, as soon as their own backward ends (FSDP2's post-backward): by the time
// layer 1's backward runs, every later unit has had its full gradients reduced into the shard and freed, and its
// full parameters released. The numbers are checked elsewhere (sharding / micro-batch tests against unsharded
// references over real ranks); this checks when the memory goes.
#include <gtest/gtest.h>

#include "tests/fsdp/fsdp_test_util.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

struct UnitSnapshot {
  bool sharded = false;
  bool has_full_grads = false;
};

// What every unit looks like when the gradient of layer 1's first matmul output arrives (mid-backward of unit 1).
std::vector<UnitSnapshot> units_during_layer1_backward(bool sync, bool reshard_after_forward) {
  std::shared_ptr<TinyDecoder> model;
  TinyConfig config;
  config.layers = 3;
  auto args = make_args("fsdp2", "fp32");
  args.engine.reshard_after_forward = reshard_after_forward;
  // Two micro-batches: the first backward accumulates without reducing, the second reduces.
  args.engine.micro_batch_size_per_gpu = 2;
  fsdp::FSDPEngine engine(args, tiny_builder(config, &model));
  engine.initialize();
  auto* fsdp = engine.fsdp_module();
  std::vector<UnitSnapshot> seen;
  int backward_calls = 0;
  model->probe = [&](size_t unit, const torch::Tensor& t) {
    if (unit != 1 || !t.requires_grad()) return;
    t.register_hook([&, fsdp](const torch::Tensor&) {
      ++backward_calls;
      if (backward_calls != (sync ? 2 : 1)) return;
      for (auto& u : fsdp->units()) {
        seen.push_back({u.state() == fsdp::FsdpUnit::State::kSharded, u.has_full_grads()});
      }
    });
  };
  forward_backward_batch(engine, make_batch(4, 8, 64, 5), sft_loss, /*forward_only=*/false);
  return seen;
}

TEST(FsdpBackward, LaterUnitsAreReducedAndReshardedBeforeEarlierOnesRun) {
  for (bool reshard_after_forward : {true, false}) {
    auto seen = units_during_layer1_backward(/*sync=*/true, reshard_after_forward);
    ASSERT_EQ(seen.size(), 5u);  // embeddings, 3 layers, final norm + head
    EXPECT_FALSE(seen[1].sharded) << "layer 1 runs its backward on full parameters";
    EXPECT_TRUE(seen[1].has_full_grads);
    for (size_t u = 2; u < seen.size(); ++u) {
      EXPECT_TRUE(seen[u].sharded) << "unit " << u << ", reshard_after_forward " << reshard_after_forward;
      EXPECT_FALSE(seen[u].has_full_grads) << "unit " << u << ", reshard_after_forward " << reshard_after_forward;
    }
  }
}

TEST(FsdpBackward, WithoutSyncFullGradientsStayToAccumulate) {
  auto seen = units_during_layer1_backward(/*sync=*/false, true);
  ASSERT_EQ(seen.size(), 5u);
  for (size_t u = 2; u < seen.size(); ++u) {
    EXPECT_TRUE(seen[u].sharded) << "unit " << u;
    EXPECT_TRUE(seen[u].has_full_grads) << "unit " << u << " (the next micro-batch adds to them)";
  }
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
