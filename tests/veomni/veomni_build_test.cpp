// VeOmniEngine's build step on a non-zero rank: the module structure only. Every parameter has the name and shape
// of rank 0's full model and no storage, and building it does not raise the process's peak memory by anything
// like the weights' size (measured against constructing the same model in full, as rank 0 does).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "models/causal_lm.h"
#include "models/model_args.h"
#include "models/model_factory.h"
#include "plugin/veomni/veomni_engine.h"
#include "tests/veomni/veomni_test_util.h"

namespace enginery {
namespace {

namespace fs = std::filesystem;

// Exposes the protected build step. It runs no collective, so rank 1 of 2 needs no group here.
class BuildProbe : public veomni::VeOmniEngine {
 public:
  using VeOmniEngine::VeOmniEngine;
  std::shared_ptr<models::DecoderModel> build() { return build_model(); }
};

std::shared_ptr<models::DecoderModel> build_on_rank1(const std::string& path, const std::string& model_type) {
  auto args = veomni_test::make_args({}, "", /*rank=*/1, /*world_size=*/2);
  args.model.path = path;
  args.model_type = model_type;
  BuildProbe probe(args);
  auto model = probe.build();
  EXPECT_FALSE(probe.built_full_weights());
  return model;
}

int64_t status_kib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  }
  ADD_FAILURE() << "no " << key << " in /proc/self/status";
  return 0;
}

// How far the process's resident memory peaks above where it stood before `fn` (Linux: writing 5 to
// /proc/self/clear_refs resets the peak, VmHWM, to the current VmRSS).
int64_t peak_growth_bytes(const std::function<void()>& fn) {
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = status_kib("VmRSS:");
  fn();
  return (status_kib("VmHWM:") - before) * 1024;
}

TEST(VeOmniBuild, NonZeroRankHasTheFullModelsNamesAndShapesWithoutStorage) {
  for (const std::string name : {"qwen2-tiny", "llama-tiny", "qwen3-tiny"}) {
    for (const std::string model_type : {"language_model", "value_model"}) {
      SCOPED_TRACE(name + " " + model_type);
      ModelConfig cfg;
      cfg.path = "builtin:" + name;
      const auto full = models::build_model(cfg, model_type)->named_parameters();
      const auto structure = build_on_rank1(cfg.path, model_type)->named_parameters();
      ASSERT_EQ(structure.size(), full.size());
      for (size_t i = 0; i < full.size(); ++i) {
        EXPECT_EQ(structure[i].key(), full[i].key());
        EXPECT_EQ(structure[i].value().sizes(), full[i].value().sizes()) << full[i].key();
        EXPECT_EQ(structure[i].value().storage().nbytes(), 0u) << full[i].key();
        EXPECT_TRUE(structure[i].value().requires_grad()) << full[i].key();
      }
    }
  }
}

TEST(VeOmniBuild, NonZeroRankDoesNotMaterialiseTheWeights) {
  // ~79M parameters (300 MiB in fp32): big enough that a full build stands far above allocator noise.
  models::ModelArgs args = models::builtin_args("qwen2-tiny");
  args.vocab_size = 16384;
  args.hidden_size = 1024;
  args.intermediate_size = 2816;
  args.num_hidden_layers = 4;
  args.num_attention_heads = 16;
  args.num_key_value_heads = 4;
  args.head_dim = 64;
  args.tie_word_embeddings = false;
  const fs::path dir = fs::temp_directory_path() / ("veomni-build-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << models::hf_config_json(args);  // the config only: no weights to read

  // LibTorch's one-time lazy setup (thread pools, generators) must not count against the first build measured.
  build_on_rank1("builtin:qwen2-tiny", "language_model");
  models::build_model(ModelConfig{}, "language_model");

  std::shared_ptr<models::DecoderModel> structure;
  const int64_t structure_peak = peak_growth_bytes([&] { structure = build_on_rank1(dir.string(), "language_model"); });
  int64_t model_bytes = 0;
  const int64_t full_peak = peak_growth_bytes([&] {
    models::CausalLM full(models::read_hf_config(dir.string()), models::HeadKind::kLanguageModel);
    for (const auto& p : full.parameters()) model_bytes += p.numel() * static_cast<int64_t>(sizeof(float));
  });
  std::error_code ignored;
  fs::remove_all(dir, ignored);

  for (const auto& p : structure->parameters()) EXPECT_EQ(p.storage().nbytes(), 0u);
  std::ostringstream numbers;
  numbers << "fp32 weights " << model_bytes / 1024 << " KiB; peak RSS growth: full build " << full_peak / 1024
          << " KiB, rank-1 structure " << structure_peak / 1024 << " KiB";
  std::cout << numbers.str() << std::endl;
  testing::Test::RecordProperty("memory", numbers.str());
  EXPECT_GT(full_peak, model_bytes * 9 / 10) << "the measurement cannot see a full build: " << numbers.str();
  EXPECT_LT(structure_peak, model_bytes / 50) << numbers.str();
}

}  // namespace
}  // namespace enginery
