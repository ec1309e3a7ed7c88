// Weight export checks (docs/ARCHITECTURE.md, "Conformance"): BaseEngine::export_weights yields what
// get_per_tensor_param yields — the same names once each, fp32 bitwise, bf16 the cast of it — and WeightBucketer's
// tables locate every tensor in its bucket. Every engine streams (a 2.0/2.1 engine through the fallback); one that
// declares "weight-export" must stream in more than one group, one unit at a time, not the whole model at once. One
// that declares "shard-export" must export pieces (host_api/exports.h) that, placed at their flat offsets, are
// get_per_tensor_param's tensors (at world size 1 a rank's pieces are whole; tests/verl checks two ranks).
#include <gtest/gtest.h>

#include <map>

#include "conformance/data.h"
#include "conformance/engine_setup.h"
#include "conformance/target.h"
#include "host_api/exports.h"
#include "engine_driver/step_loop.h"
#include "engine_driver/weight_export.h"

namespace enginery {
namespace conformance {
namespace {

// The stream's tensors copied to the CPU by name; `groups` counts next() calls that returned something.
std::map<std::string, torch::Tensor> drain(WeightStream& stream, size_t& groups) {
  std::map<std::string, torch::Tensor> out;
  groups = 0;
  for (auto group = stream.next(); !group.empty(); group = stream.next()) {
    ++groups;
    for (const auto& t : group) {
      EXPECT_TRUE(out.emplace(t.name, t.tensor.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true)).second)
          << "'" << t.name << "' is streamed twice";
    }
  }
  return out;
}

void check_weight_export(const Target& target) {
  auto engine = make_engine(target, EngineSpec{});
  train_batch(*engine, make_batch(target), token_mean_loss(target));  // weights that are not the initial ones
  std::map<std::string, torch::Tensor> want;
  for (const auto& [name, t] : read_params(*engine)) want[name] = t.to(torch::kFloat);

  for (const auto dtype : {c10::kFloat, c10::kBFloat16}) {
    size_t groups = 0;
    const auto got = drain(*engine->export_weights(dtype), groups);
    EXPECT_EQ(got.size(), want.size()) << c10::toString(dtype) << ": tensors streamed";
    for (const auto& [name, t] : want) {
      auto it = got.find(name);
      if (it == got.end()) {
        ADD_FAILURE() << c10::toString(dtype) << ": '" << name << "' is not streamed";
        continue;
      }
      EXPECT_EQ(it->second.scalar_type(), dtype) << name;
      EXPECT_TRUE(torch::equal(it->second, t.to(dtype))) << c10::toString(dtype) << ": '" << name
                                                          << "' differs from get_per_tensor_param";
    }
    if (target.has("weight-export")) EXPECT_GT(groups, 1u) << "a native stream gathers one unit per group";
  }

  WeightBucketer bucketer(engine->export_weights(c10::kBFloat16), /*bucket_bytes=*/1 << 16);
  WeightBucket bucket;
  size_t located = 0;
  while (bucketer.next(bucket)) {
    const auto buffer = bucket.buffer.to(torch::kCPU);
    for (const auto& e : bucket.entries) {
      const auto view = buffer.narrow(0, e.offset, e.numel).view(e.shape);
      EXPECT_TRUE(torch::equal(view, want.at(e.name).to(c10::kBFloat16))) << "bucket entry '" << e.name << "'";
      ++located;
    }
  }
  EXPECT_EQ(located, want.size()) << "bucket tables";
}

void check_shard_export(const Target& target) {
  auto engine = make_engine(target, EngineSpec{});
  train_batch(*engine, make_batch(target), token_mean_loss(target));
  BaseEngine* exporter = engine.get();  // declared 'shard-export': BaseEngine's refusing default fails the check
  const ShardPlacement placement = exporter->shard_placement();
  EXPECT_EQ(placement.group_ranks, std::vector<int64_t>{0}) << "group of a world of one";
  EXPECT_TRUE(placement.contributes);
  std::map<std::string, torch::Tensor> want;
  for (const auto& [name, t] : read_params(*engine)) want[name] = t.to(torch::kFloat);

  for (const auto dtype : {c10::kFloat, c10::kBFloat16}) {
    auto stream = exporter->export_shards(dtype);
    std::map<std::string, torch::Tensor> got;
    for (auto group = stream->next(); !group.empty(); group = stream->next()) {
      for (const auto& piece : group) {
        auto full = want.count(piece.name) ? torch::zeros({want.at(piece.name).numel()}, dtype) : torch::Tensor();
        if (!full.defined()) {
          ADD_FAILURE() << "'" << piece.name << "' is not a name get_per_tensor_param gives";
          continue;
        }
        EXPECT_EQ(piece.local.scalar_type(), dtype) << piece.name;
        EXPECT_EQ(piece.full_shape, want.at(piece.name).sizes().vec()) << piece.name;
        full.narrow(0, piece.flat_offset, piece.local.numel()).copy_(piece.local.to(torch::kCPU));
        EXPECT_TRUE(got.emplace(piece.name, full.view(piece.full_shape)).second) << "'" << piece.name << "' twice";
      }
    }
    EXPECT_EQ(got.size(), want.size()) << c10::toString(dtype) << ": pieces exported";
    for (const auto& [name, t] : got) {
      EXPECT_TRUE(torch::equal(t, want.at(name).to(dtype))) << c10::toString(dtype) << ": '" << name
                                                           << "' placed differs from get_per_tensor_param";
    }
  }
}

}  // namespace

void add_export_checks(std::vector<Check>& checks) {
  checks.push_back({"weight_export",
                    "export_weights(fp32 | bf16) and its buckets give get_per_tensor_param's tensors, cast exactly",
                    requires_precisions({"fp32"}), check_weight_export});
  checks.push_back({"shard_export",
                    "export_shards(fp32 | bf16) pieces, placed at their flat offsets, are get_per_tensor_param's",
                    requires_precisions({"fp32"}, {"shard-export"}), check_shard_export});
}

}  // namespace conformance
}  // namespace enginery
