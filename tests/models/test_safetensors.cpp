// safetensors I/O: load -> save -> load is bit-identical for single-file and sharded checkpoints, through the raw
// reader/writer and through build_model / save_hf; the HF-written sharded fixture is read through its index.
#include <gtest/gtest.h>

#include <filesystem>

#include "host_api/error.h"
#include "models/model_factory.h"
#include "models/safetensors.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

using testing::data_dir;
namespace fs = std::filesystem;

// Bitwise equality (torch::equal would treat NaN payloads and -0.0 loosely).
void expect_bit_identical(const NamedTensors& a, const NamedTensors& b) {
  std::map<std::string, torch::Tensor> mb(b.begin(), b.end());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(mb.count(name)) << name;
    const auto& u = mb[name];
    ASSERT_EQ(t.scalar_type(), u.scalar_type()) << name;
    ASSERT_EQ(t.sizes(), u.sizes()) << name;
    auto tc = t.contiguous(), uc = u.contiguous();
    EXPECT_EQ(0, std::memcmp(tc.data_ptr(), uc.data_ptr(), tc.numel() * tc.element_size())) << name;
  }
}

TEST(Safetensors, ReadsTransformersShardedCheckpoint) {
  auto tensors = read_safetensors_dir(data_dir("hf_llama_gqa"));
  std::map<std::string, torch::Tensor> m(tensors.begin(), tensors.end());
  EXPECT_EQ(m.size(), 21u);  // embed + 2 x 9 + norm + lm_head
  EXPECT_EQ(m.at("model.embed_tokens.weight").sizes(), (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(m.at("model.layers.1.self_attn.k_proj.weight").sizes(), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(m.at("lm_head.weight").scalar_type(), torch::kFloat);
}

TEST(Safetensors, RoundTripSingleAndShardedIsBitIdentical) {
  testing::TempDir tmp;
  auto original = read_safetensors_dir(data_dir("hf_llama_gqa"));
  // Mixed dtypes, a scalar-free empty tensor and odd sizes.
  original.emplace_back("extra.bf16", torch::randn({3, 5}).to(torch::kBFloat16));
  original.emplace_back("extra.f16", torch::randn({7}).to(torch::kHalf));
  original.emplace_back("extra.empty", torch::zeros({0, 4}));
  write_safetensors_dir(tmp.sub("single"), original, 0);
  EXPECT_TRUE(fs::exists(tmp.sub("single/model.safetensors")));
  auto single = read_safetensors_dir(tmp.sub("single"));
  expect_bit_identical(original, single);

  write_safetensors_dir(tmp.sub("sharded"), single, 20000);
  EXPECT_TRUE(fs::exists(tmp.sub("sharded/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(tmp.sub("sharded/model.safetensors")));
  auto sharded = read_safetensors_dir(tmp.sub("sharded"));
  expect_bit_identical(original, sharded);
  auto index = testing::read_json(tmp.sub("sharded/model.safetensors.index.json"));
  EXPECT_GT(index["metadata"]["total_size"].get<int64_t>(), 100000);
  EXPECT_EQ(index["weight_map"].size(), original.size());

  // Saving what was loaded writes the same bytes.
  write_safetensors_dir(tmp.sub("sharded2"), sharded, 20000);
  for (const auto& entry : fs::directory_iterator(tmp.sub("sharded"))) {
    const auto name = entry.path().filename().string();
    EXPECT_EQ(testing::read_bytes(entry.path().string()), testing::read_bytes(tmp.sub("sharded2/" + name))) << name;
  }
}

TEST(Safetensors, ModelLoadSaveLoadIsBitIdentical) {
  testing::TempDir tmp;
  for (const char* fixture : {"hf_llama_gqa", "hf_qwen2_tied", "hf_qwen3_qknorm"}) {
    ModelConfig cfg;
    cfg.path = data_dir(fixture);
    auto model = build_model(cfg, "language_model");
    for (int64_t shard : {int64_t{0}, int64_t{30000}}) {
      const auto out = tmp.sub(std::string(fixture) + "_" + std::to_string(shard));
      save_hf(*model, out, shard);
      EXPECT_EQ(fs::exists(out + "/model.safetensors.index.json"), shard > 0) << out;
      expect_bit_identical(read_safetensors_dir(cfg.path), read_safetensors_dir(out));
      ModelConfig again_cfg;
      again_cfg.path = out;
      auto again = build_model(again_cfg, "language_model");
      auto pa = model->named_parameters(), pb = again->named_parameters();
      for (auto& p : pa) {
        auto a = p.value().contiguous(), b = pb[p.key()].contiguous();
        EXPECT_EQ(0, std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size())) << p.key();
      }
      EXPECT_EQ(testing::read_bytes(out + "/config.json"), testing::read_bytes(cfg.path + "/config.json"));
    }
  }
}

TEST(Safetensors, Bf16CheckpointRoundTripsThroughFp32Parameters) {
  testing::TempDir tmp;
  ModelConfig cfg;
  cfg.path = "builtin:qwen3-tiny";
  auto model = build_model(cfg, "language_model");
  // Rewrite the config with dtype bfloat16: save_hf then stores bf16, and bf16 -> fp32 -> bf16 is exact.
  save_hf(*model, tmp.sub("fp32"), 0);
  auto text = testing::read_bytes(tmp.sub("fp32/config.json"));
  const auto pos = text.find("\"float32\"");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 9, "\"bfloat16\"");
  testing::write_text(tmp.sub("fp32/config.json"), text);
  ModelConfig c1;
  c1.path = tmp.sub("fp32");
  auto m1 = build_model(c1, "language_model");
  save_hf(*m1, tmp.sub("bf16a"), 0);
  ModelConfig c2;
  c2.path = tmp.sub("bf16a");
  save_hf(*build_model(c2, "language_model"), tmp.sub("bf16b"), 0);
  auto a = read_safetensors_dir(tmp.sub("bf16a")), b = read_safetensors_dir(tmp.sub("bf16b"));
  EXPECT_EQ(a.front().second.scalar_type(), torch::kBFloat16);
  expect_bit_identical(a, b);
}

TEST(Safetensors, CorruptFilesAreNamed) {
  testing::TempDir tmp;
  testing::write_text(tmp.sub("model.safetensors"), "xx");
  try {
    read_safetensors_dir(tmp.str());
    FAIL() << "expected an error";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.sub("model.safetensors")), std::string::npos) << e.what();
  }
  testing::TempDir empty;
  EXPECT_THROW(read_safetensors_dir(empty.str()), EngineryError);
}

}  // namespace
}  // namespace models
}  // namespace enginery
