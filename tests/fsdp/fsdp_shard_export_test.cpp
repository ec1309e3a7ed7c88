// Shard export (host_api/exports.h; docs/ARCHITECTURE.md, "The contract") over 4 real Gloo ranks with HSDP
// (fsdp_size 2: shard groups {0, 1} and {2, 3}), both layouts, after a step: every piece is the slice
// [flat_offset, + numel) of get_per_tensor_param's tensor, bitwise in fp32 and its cast in bf16; the pieces of a
// shard group cover each tensor exactly once; the placement names the group and only the first replica
// contributes. (tests/verl checks the same through verl's own spec helpers at 1 and 2 ranks.)
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <map>
#include <set>

#include "host_api/exports.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"

namespace enginery {
namespace fsdp_test {
namespace {

class ShardExport : public ::testing::TestWithParam<std::string> {};

TEST_P(ShardExport, PiecesAreSlicesOfTheFullWeightsAndEachShardGroupCoversThemOnce) {
  const std::string strategy = GetParam();
  testing::run_ranks(4, [strategy](const testing::RankContext& ctx) {
    auto args = make_args(strategy, "fp32", ctx.rank, ctx.world_size, ctx.group, ctx.store);
    args.model.path = "builtin:qwen2-tiny";
    args.engine.fsdp_size = 2;
    fsdp::FSDPEngine engine(args);
    engine.initialize();
    Batch batch = make_batch(8, 8, 64, 5);
    train_batch(engine, rank_slice(batch, ctx.rank, ctx.world_size), sft_loss);

    const ShardPlacement placement = engine.shard_placement();
    const int64_t first = ctx.rank / 2 * 2;
    EXPECT_EQ(placement.group_ranks, (std::vector<int64_t>{first, first + 1}));
    EXPECT_EQ(placement.contributes, ctx.rank < 2);

    const auto full = engine_params(engine);  // the full tensors (collective)
    std::ostringstream ranges;
    for (const auto dtype : {c10::kFloat, c10::kBFloat16}) {
      auto stream = engine.export_shards(dtype);
      std::set<std::string> seen;
      for (auto group = stream->next(); !group.empty(); group = stream->next()) {
        for (const auto& piece : group) {
          EXPECT_TRUE(seen.insert(piece.name).second) << piece.name << " exported twice";
          auto it = full.find(piece.name);
          ASSERT_NE(it, full.end()) << piece.name << " is not a name get_per_tensor_param gives";
          EXPECT_EQ(piece.full_shape, it->second.sizes().vec()) << piece.name;
          EXPECT_EQ(piece.local.scalar_type(), dtype) << piece.name;
          ASSERT_LE(piece.flat_offset + piece.local.numel(), it->second.numel()) << piece.name;
          const auto slice = it->second.reshape({-1}).narrow(0, piece.flat_offset, piece.local.numel());
          EXPECT_TRUE(torch::equal(piece.local, slice.to(dtype))) << piece.name << " in " << c10::toString(dtype);
          if (dtype == c10::kFloat) ranges << piece.name << " " << piece.flat_offset << " " << piece.local.numel() << "\n";
        }
      }
      EXPECT_EQ(seen.size(), full.size()) << c10::toString(dtype);
    }
    // Rank 0 reads every rank's ranges from the store (get waits for the key; the engine's collectives span only a
    // shard group here, so they would not order rank 2's writes before rank 0's reads).
    const std::string text = ranges.str();
    ctx.store->set("ranges" + std::to_string(ctx.rank), std::vector<uint8_t>(text.begin(), text.end()));
    if (ctx.rank != 0) return;
    for (const int64_t group_first : {0, 2}) {
      std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> cover;
      for (int64_t r = group_first; r < group_first + 2; ++r) {
        const auto bytes = ctx.store->get("ranges" + std::to_string(r));
        std::istringstream in(std::string(bytes.begin(), bytes.end()));
        std::string name;
        int64_t offset = 0, numel = 0;
        while (in >> name >> offset >> numel) {
          if (numel > 0) cover[name].push_back({offset, offset + numel});
        }
      }
      for (const auto& [name, t] : full) {
        auto spans = cover[name];
        std::sort(spans.begin(), spans.end());
        int64_t at = 0;
        for (const auto& [begin, end] : spans) {
          EXPECT_EQ(begin, at) << name << ": group of rank " << group_first << " leaves a gap or overlaps";
          at = end;
        }
        EXPECT_EQ(at, t.numel()) << name << ": group of rank " << group_first << " does not reach the end";
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardExport, ::testing::Values("fsdp", "fsdp2"));

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
