// `enginery generate` end to end: greedy output equals the library's generate() on the same left-padded batch,
// sampling repeats for a seed, and bad prompt files or flags are named.
#include <gtest/gtest.h>

#include <cstdlib>

#include "models/generation.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

int run(const std::string& args, const std::string& log) {
  const std::string cmd = std::string("'") + ENGINERY_BIN + "' generate " + args + " > '" + log + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs the command on `prompts` (JSON text) with `flags`; the parsed output, or a failure with the log.
nlohmann::json generate_json(const testing::TempDir& tmp, const std::string& prompts, const std::string& flags) {
  testing::write_text(tmp.sub("prompts.json"), prompts);
  const int rc = run("--model builtin:llama-tiny --prompts '" + tmp.sub("prompts.json") + "' --out '" +
                         tmp.sub("out.json") + "' " + flags,
                     tmp.sub("log"));
  EXPECT_EQ(rc, 0) << testing::read_bytes(tmp.sub("log"));
  return rc == 0 ? testing::read_json(tmp.sub("out.json")) : nlohmann::json();
}

TEST(GenerateCommand, GreedyEqualsTheLibrary) {
  testing::TempDir tmp;
  auto out = generate_json(tmp, "[[5, 6, 7, 8], [9], [10, 11]]", "--greedy --max-new-tokens 6");
  ASSERT_EQ(out["responses"].size(), 3u);
  // The same batch in-process, left-padded with the default pad id 0 (the built-in config names none).
  auto model = testing::builtin("llama-tiny");
  auto ids = torch::tensor({5, 6, 7, 8, 0, 0, 0, 9, 0, 0, 10, 11}, torch::kLong).view({3, 4});
  auto mask = torch::tensor({1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 1}, torch::kLong).view({3, 4});
  SamplingParams sp;
  sp.greedy = true;
  sp.max_new_tokens = 6;
  auto r = generate(*model, ids, mask, sp);
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<int64_t> expected;
    for (int64_t j = 0; j < 6; ++j) expected.push_back(r.sequences[i][4 + j].item<int64_t>());
    EXPECT_EQ(out["responses"][i].get<std::vector<int64_t>>(), expected) << i;
    EXPECT_EQ(out["lengths"][i].get<int64_t>(), 6);
    EXPECT_FALSE(out["stopped"][i].get<bool>());
  }
  // A stop id: the first prompt's third token ends it there, marked as stopped.
  const int64_t eos = out["responses"][0][2].get<int64_t>();
  auto stopped = generate_json(tmp, "[[5, 6, 7, 8], [9], [10, 11]]",
                               "--greedy --max-new-tokens 6 --eos-token-id " + std::to_string(eos));
  const auto first = out["responses"][0].get<std::vector<int64_t>>();
  const auto len = std::find(first.begin(), first.end(), eos) - first.begin() + 1;
  EXPECT_EQ(stopped["lengths"][0].get<int64_t>(), len);
  EXPECT_TRUE(stopped["stopped"][0].get<bool>());
  EXPECT_EQ(stopped["responses"][0].back().get<int64_t>(), eos);
}

TEST(GenerateCommand, SamplingRepeatsForASeed) {
  testing::TempDir tmp;
  const std::string prompts = "[[1, 2, 3], [4, 5, 6, 7, 8], [9]]";
  const std::string flags = "--temperature 1.3 --top-p 0.95 --top-k 50 --max-new-tokens 8 --batch-size 2";
  auto a = generate_json(tmp, prompts, flags + " --seed 3");
  auto again = generate_json(tmp, prompts, flags + " --seed 3");
  auto other = generate_json(tmp, prompts, flags + " --seed 4");
  EXPECT_EQ(a["responses"], again["responses"]);
  EXPECT_NE(a["responses"], other["responses"]);
}

// -1 is top-k "off" as verl writes it, the same as 0; a tiny top-p keeps the most likely token (greedy).
TEST(GenerateCommand, OffSpellingsOfTopKAndATinyTopPSample) {
  testing::TempDir tmp;
  const std::string prompts = "[[1, 2, 3], [9]]";
  auto off = generate_json(tmp, prompts, "--top-k -1 --max-new-tokens 6 --seed 5");
  auto zero = generate_json(tmp, prompts, "--top-k 0 --max-new-tokens 6 --seed 5");
  EXPECT_EQ(off["responses"], zero["responses"]);
  auto tiny = generate_json(tmp, prompts, "--top-p 1e-300 --max-new-tokens 6 --seed 5");
  auto greedy = generate_json(tmp, prompts, "--greedy --max-new-tokens 6");
  EXPECT_EQ(tiny["responses"], greedy["responses"]);
}

TEST(GenerateCommand, BadPromptsAndFlagsAreNamed) {
  testing::TempDir tmp;
  const auto prompts = tmp.sub("prompts.json");
  auto fails_with = [&](const std::string& text, const std::string& flags, const std::string& needle) {
    testing::write_text(prompts, text);
    EXPECT_NE(run("--model builtin:qwen2-tiny --prompts '" + prompts + "' --out '" + tmp.sub("o.json") + "' " + flags,
                  tmp.sub("log")),
              0)
        << text << " " << flags;
    const auto log = testing::read_bytes(tmp.sub("log"));
    EXPECT_NE(log.find(needle), std::string::npos) << log;
  };
  fails_with("[[1, 2], []]", "", prompts + ": [1]");
  fails_with("[[1, 2], [3, 300]]", "", "0 .. 255");
  fails_with("{\"prompts\": []}", "", "a JSON list of lists of integer token ids");
  fails_with("[[1, 2]]", "--max-new-tokens 5000", "max_position_embeddings");
  fails_with("[[1, 2], [1, 2, 3, 4]]", "--max-new-tokens 2045",
             "--max-new-tokens: max-new-tokens = 2045 after a prompt of 4 tokens (" + prompts + ": [1])");
  fails_with("[[1, 2]]", "--eos-token-id 999", "--eos-token-id");
  // The sampling values, lengths and dtype through the check GRPO's rollout.* keys get
  // (models/generation_settings.h): the same reasons, named by flag.
  fails_with("[[1, 2]]", "--temperature 0",
             "--temperature: temperature = 0 cannot be sampled from (logits / temperature overflows, softmax gives "
             "NaN) (allowed: a finite number >= 0.01 (lower is the argmax: greedy decoding))");
  fails_with("[[1, 2]]", "--temperature 1e-30", "--temperature: temperature = 1e-30 cannot be sampled from");
  fails_with("[[1, 2]]", "--top-p 0", "--top-p: top-p = 0 keeps no token (allowed: (0, 1]; 1 = off)");
  fails_with("[[1, 2]]", "--top-k -2", "--top-k: top-k = -2 is not a token count (allowed: -1 or 0 (off), or >= 1)");
  fails_with("[[1, 2, 3]]", "--max-new-tokens 9223372036854775807",
             "--max-new-tokens: max-new-tokens = 9223372036854775807 after a prompt of 3 tokens (" + prompts +
                 ": [0]) exceeds max_position_embeddings = 2048 of --model builtin:qwen2-tiny (allowed: 1..2045)");
  if (!torch::cuda::is_available()) {
    fails_with("[[1, 2]]", "--device cuda", "--device: CUDA is not available");
  }
  const auto missing = tmp.sub("missing.json");
  EXPECT_NE(run("--model builtin:qwen2-tiny --prompts '" + missing + "' --out '" + tmp.sub("o.json") + "'", tmp.sub("log")),
            0);
  EXPECT_NE(testing::read_bytes(tmp.sub("log")).find(tmp.sub("missing.json")), std::string::npos);
}

}  // namespace
}  // namespace models
}  // namespace enginery
