// `enginery logprobs` end to end: the transformers fixture's token lists in, the recorded values out (t = 0..len-2
// layout), and a clear error for a token outside the vocabulary.
#include <gtest/gtest.h>

#include <cstdlib>

#include "test_util.h"

namespace enginery {
namespace models {
namespace {

int run(const std::string& args, const std::string& log) {
  const std::string cmd = std::string("'") + ENGINERY_BIN + "' logprobs " + args + " > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(LogprobsCommand, ReproducesTransformersValues) {
  testing::TempDir tmp;
  const auto dir = testing::data_dir("hf_llama_gqa");
  auto expected = testing::read_json(dir + "/expected.json");
  auto tokens = expected["tokens"];
  tokens.push_back(nlohmann::json::array({5}));  // a single token: no predictions
  testing::write_text(tmp.sub("tokens.json"), tokens.dump());
  ASSERT_EQ(run("--model '" + dir + "' --tokens '" + tmp.sub("tokens.json") + "' --out '" + tmp.sub("out.json") + "'",
                tmp.sub("log")),
            0)
      << testing::read_bytes(tmp.sub("log"));
  auto out = testing::read_json(tmp.sub("out.json"));
  ASSERT_EQ(out["log_probs"].size(), tokens.size());
  ASSERT_EQ(out["entropy"].size(), tokens.size());
  EXPECT_TRUE(out["log_probs"].back().empty());
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    ASSERT_EQ(out["log_probs"][i].size(), expected["log_probs"][i].size()) << i;
    for (size_t t = 0; t < out["log_probs"][i].size(); ++t) {
      EXPECT_NEAR(out["log_probs"][i][t].get<double>(), expected["log_probs"][i][t].get<double>(), 1e-4);
      EXPECT_NEAR(out["entropy"][i][t].get<double>(), expected["entropy"][i][t].get<double>(), 1e-4);
    }
  }
}

TEST(LogprobsCommand, TokenOutsideTheVocabularyIsNamed) {
  testing::TempDir tmp;
  testing::write_text(tmp.sub("tokens.json"), "[[1, 2, 3], [4, 999]]");
  EXPECT_NE(run("--model builtin:qwen2-tiny --tokens '" + tmp.sub("tokens.json") + "' --out '" + tmp.sub("o.json") + "'",
                tmp.sub("log")),
            0);
  const auto log = testing::read_bytes(tmp.sub("log"));
  EXPECT_NE(log.find(tmp.sub("tokens.json") + ": [1][1]"), std::string::npos) << log;
  EXPECT_NE(log.find("0 .. 255"), std::string::npos) << log;
}

}  // namespace
}  // namespace models
}  // namespace enginery
