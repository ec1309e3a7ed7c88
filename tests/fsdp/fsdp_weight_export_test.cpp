// Weight export (docs/ARCHITECTURE.md, "The contract"): BaseEngine::export_weights and WeightBucketer over real Gloo
// ranks at world sizes 1, 2 and 4, compared with the independent path the weights also take, the Hugging Face
// directory a checkpoint writes (save_contents "hf_model") read back by models::build_model.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "host_api/error.h"
#include "host_api/exports.h"
#include "models/model_factory.h"
#include "tests/fsdp/fsdp_test_util.h"
#include "tests/support/multirank.h"
#include "engine_driver/step_loop.h"
#include "engine_driver/weight_export.h"

namespace enginery {
namespace fsdp_test {
namespace {

struct Case {
  std::string strategy;
  std::string model;
  int world;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.strategy << " " << c.model << " world " << c.world; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string model = info.param.model.substr(info.param.model.find(':') + 1);
  for (auto& c : model) c = c == '-' ? '_' : c;
  return info.param.strategy + "_" + model + "_world" + std::to_string(info.param.world);
}

// The engine after one step (so the weights are no longer the initial ones) and the HF directory its checkpoint
// wrote, loaded back as fp32 tensors by name.
std::map<std::string, torch::Tensor> train_and_read_hf_export(fsdp::FSDPEngine& engine,
                                                              const testing::RankContext& ctx) {
  Batch batch = make_batch(4, 8, 64, 11);
  train_batch(engine, rank_slice(batch, ctx.rank, ctx.world_size), sft_loss);
  const std::string dir = ctx.shared_dir + "/global_step_1";
  engine.save_checkpoint(dir, 1, 0);
  ModelConfig from_dir;
  from_dir.path = dir + "/huggingface";
  auto model = models::build_model(from_dir, "language_model");
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

class WeightExport : public ::testing::TestWithParam<Case> {};

// fp32: bitwise the exported checkpoint; bf16: bitwise its cast (the shards are cast before the all-gather). One
// group per FSDP unit, each name once.
TEST_P(WeightExport, StreamEqualsTheHfExportInFp32AndBf16) {
  const Case c = GetParam();
  testing::run_ranks(c.world, [c](const testing::RankContext& ctx) {
    auto args = make_args(c.strategy, "fp32", ctx.rank, ctx.world_size, ctx.group, ctx.store);
    args.model.path = c.model;
    args.checkpoint.save_contents = {"model", "hf_model"};
    fsdp::FSDPEngine engine(args);
    engine.initialize();
    const auto hf = train_and_read_hf_export(engine, ctx);
    for (const auto dtype : {c10::kFloat, c10::kBFloat16}) {
      auto stream = engine.export_weights(dtype);
      std::set<std::string> seen;
      size_t groups = 0;
      for (auto group = stream->next(); !group.empty(); group = stream->next()) {
        ++groups;
        for (const auto& t : group) {
          EXPECT_TRUE(seen.insert(t.name).second) << t.name << " exported twice";
          auto it = hf.find(t.name);
          ASSERT_NE(it, hf.end()) << t.name << " is not in the HF export";
          EXPECT_EQ(t.tensor.scalar_type(), dtype) << t.name;
          EXPECT_TRUE(torch::equal(t.tensor, it->second.to(dtype))) << t.name << " in " << c10::toString(dtype);
        }
      }
      EXPECT_EQ(seen.size(), hf.size()) << c10::toString(dtype);
      EXPECT_EQ(groups, engine.fsdp_module()->units().size()) << "one group per unit";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, WeightExport,
                         ::testing::Values(Case{"fsdp2", "builtin:qwen2-tiny", 1}, Case{"fsdp", "builtin:llama-tiny", 1},
                                           Case{"fsdp2", "builtin:qwen2-tiny", 2}, Case{"fsdp", "builtin:llama-tiny", 2},
                                           Case{"fsdp2", "builtin:qwen3-tiny", 4}, Case{"fsdp", "builtin:qwen2-tiny", 4}),
                         case_name);

// Buckets: every tensor once, at its table entry, in stream order; no bucket over the size unless it holds a
// single larger tensor; buffers in the stream's dtype.
TEST(WeightExportBuckets, TableCoversEveryTensorWithinTheBucketSize) {
  testing::run_ranks(2, [](const testing::RankContext& ctx) {
    auto args = make_args("fsdp2", "fp32", ctx.rank, ctx.world_size, ctx.group, ctx.store);
    args.model.path = "builtin:llama-tiny";
    fsdp::FSDPEngine engine(args);
    engine.initialize();
    const auto want = engine_params(engine);
    const int64_t bucket_bytes = 6000;
    WeightBucketer bucketer(engine.export_weights(c10::kBFloat16), bucket_bytes);
    std::vector<std::string> order;
    WeightBucket bucket;
    size_t buckets = 0;
    while (bucketer.next(bucket)) {
      ++buckets;
      ASSERT_FALSE(bucket.entries.empty());
      EXPECT_EQ(bucket.buffer.scalar_type(), c10::kBFloat16);
      const int64_t bytes = bucket.buffer.numel() * 2;
      EXPECT_TRUE(bytes <= bucket_bytes || bucket.entries.size() == 1) << "bucket " << buckets << ": " << bytes;
      int64_t expected_offset = 0;
      for (const auto& e : bucket.entries) {
        EXPECT_EQ(e.offset, expected_offset) << e.name;
        expected_offset += e.numel;
        const auto view = bucket.buffer.narrow(0, e.offset, e.numel).view(e.shape);
        EXPECT_TRUE(torch::equal(view, want.at(e.name).to(c10::kBFloat16))) << e.name;
        order.push_back(e.name);
      }
      EXPECT_EQ(expected_offset, bucket.buffer.numel());
    }
    EXPECT_EQ(order.size(), want.size());
    EXPECT_EQ(std::set<std::string>(order.begin(), order.end()).size(), want.size());
    EXPECT_GT(buckets, 2u) << "the size must actually split the model";
    EXPECT_FALSE(bucketer.next(bucket)) << "an exhausted bucketer stays exhausted";
  });
}

TEST(WeightExportBuckets, NonPositiveSizeIsRefused) {
  auto args = make_args("fsdp2", "fp32");
  args.model.path = "builtin:llama-tiny";
  fsdp::FSDPEngine engine(args);
  engine.initialize();
  try {
    WeightBucketer bucketer(engine.export_weights(c10::kFloat), 0);
    FAIL() << "a zero bucket size was accepted";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find("WeightBucketer"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
