// Every per-token field of a .jsonl row is checked against the row (trainer/data/jsonl_row.cpp, README "Data files"):
// attention_mask and length mark right padding, which is dropped (the same batch as the row written without it),
// masks are 0/1, a row must have a target, a field nothing reads is refused by name unless data.unknown_fields =
// "ignore", and data.truncation decides what happens to a row longer than data.max_length. Each error names the
// file:line, the field and what is allowed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "host_api/error.h"
#include "support/torch_compat.h"
#include "trainer/data/dataset.h"

namespace enginery {
namespace {

class JsonlRows : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("enginery_jsonl_rows_" + std::to_string(getpid()));
    compat::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { compat::remove_all(dir_); }

  // The rows as a file; its path.
  std::string write(const std::string& name, const std::string& rows) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << rows;
    return path;
  }
  std::vector<Example> load(const std::string& rows, const JsonlOptions& options = {}, int64_t max_length = 64) {
    auto data = open_dataset(write("ok.jsonl", rows), "train", max_length, 3, 0, 1, limits_, options);
    std::vector<Example> out;
    for (int64_t i = 0; i < data->size(); ++i) out.push_back(data->get(i));
    return out;
  }
  // The error a file of `rows` gives, with "<path>" standing for the file's path.
  std::string error(const std::string& rows, const JsonlOptions& options = {}, int64_t max_length = 64) {
    const std::string path = write("bad.jsonl", rows);
    try {
      open_dataset(path, "train", max_length, 3, 0, 1, limits_, options);
    } catch (const EngineryError& e) {
      std::string text = e.what();
      for (size_t at = text.find(path); at != std::string::npos; at = text.find(path)) {
        text.replace(at, path.size(), "<path>");
      }
      return text;
    }
    return "no error";
  }

  std::filesystem::path dir_;
  TokenLimits limits_{100, 32, "model.path = builtin:test"};
};

JsonlOptions ppo_options() {
  JsonlOptions o;
  o.loss_inputs = {"old_log_probs", "advantages"};
  o.loss_name = "loss.type = ppo";
  o.other_loss_inputs = {{"values", "loss.type = value"}, {"returns", "loss.type = value"}};
  return o;
}

TEST_F(JsonlRows, AttentionMaskAndLengthMarkPaddingThatIsDropped) {
  // The reference: the same row written without its padding.
  const Example plain = load(R"({"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]})" "\n")[0];
  for (const std::string padded :
       {R"({"input_ids": [5, 6, 7, 0, 0], "attention_mask": [1, 1, 1, 0, 0], "loss_mask": [0, 1, 1, 0, 0]})",
        R"({"input_ids": [5, 6, 7, 0, 0], "length": 3, "loss_mask": [0, 1, 1, 0, 0]})",
        R"({"input_ids": [5, 6, 7, 0], "length": 3, "attention_mask": [true, true, true, false], )"
        R"("loss_mask": [false, true, true, false]})"}) {
    const Example row = load(padded + "\n")[0];
    EXPECT_EQ(row.input_ids, plain.input_ids) << padded;
    EXPECT_EQ(row.loss_mask, plain.loss_mask) << padded;
    const Batch a = collate({row, plain});
    EXPECT_TRUE(a.at("attention_mask")[0].equal(a.at("attention_mask")[1])) << padded;  // the row's own mask is
    EXPECT_TRUE(a.at("loss_mask")[0].equal(a.at("loss_mask")[1])) << padded;            // the computed one
  }
}

TEST_F(JsonlRows, AttentionMaskThatIsNotRightPaddingIsRefused) {
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "attention_mask": [0, 1, 1, 1]})" "\n"),  // left padding
            "<path>:1: attention_mask[1] = 1 follows a 0: only right padding is read (allowed: 1s for the real "
            "tokens, then 0s for padding)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "attention_mask": [1, 0, 0, 0]})" "\n"),
            "<path>:1: attention_mask marks 1 real tokens (allowed: at least 2 real tokens (a target needs a token "
            "before it))");
  EXPECT_EQ(error("{\"input_ids\": [1, 2]}\n" R"({"input_ids": [5, 6, 7, 8], "attention_mask": [1, 1, 0, 1]})" "\n"),
            "<path>:2: attention_mask[3] = 1 follows a 0: only right padding is read (allowed: 1s for the real "
            "tokens, then 0s for padding)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "attention_mask": [1, 1, 2, 0]})" "\n"),
            "<path>:1: attention_mask[2] = 2 is not 0 or 1 (allowed: 0 or 1 (or false / true) per token)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "attention_mask": [1, 1, 1]})" "\n"),
            "<path>:1: \"attention_mask\" has 3 entries, input_ids 4 (allowed: one entry per token of input_ids)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "attention_mask": [1, 1, 1, 0], "loss_mask": [0, 1, 1, 1]})" "\n"),
            "<path>:1: loss_mask[3] = 1 marks a padding token as a target (allowed: loss_mask 0 wherever "
            "attention_mask is 0 (or past length))");
}

TEST_F(JsonlRows, LengthMustFitTheRowAndAgreeWithTheMask) {
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "length": -3})" "\n"),
            "<path>:1: length = -3 does not fit a row of 4 tokens (allowed: an integer 2..4: the real tokens, the "
            "rest is padding)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "length": 9})" "\n"),
            "<path>:1: length = 9 does not fit a row of 4 tokens (allowed: an integer 2..4: the real tokens, the "
            "rest is padding)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "length": "4"})" "\n"),
            "<path>:1: length = \"4\" does not fit a row of 4 tokens (allowed: an integer 2..4: the real tokens, "
            "the rest is padding)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7, 8], "length": 3, "attention_mask": [1, 1, 0, 0]})" "\n"),
            "<path>:1: length = 3 but attention_mask marks 2 real tokens (allowed: the same count in both)");
}

TEST_F(JsonlRows, LossMaskIsZeroOrOneAndSelectsATarget) {
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "loss_mask": [0, -1, 1]})" "\n"),
            "<path>:1: loss_mask[1] = -1 is not 0 or 1 (allowed: 0 or 1 (or false / true) per token)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "loss_mask": [0, 0.5, 1]})" "\n"),
            "<path>:1: loss_mask[1] = 0.5 is not 0 or 1 (allowed: 0 or 1 (or false / true) per token)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "loss_mask": 1})" "\n"),
            "<path>:1: \"loss_mask\" must be an array with one entry per token, got 1 (allowed: an array as long as "
            "input_ids)");
  // Only position 0 marked: it has no context, so nothing is left to train on (it was a NaN loss every step).
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "loss_mask": [1, 0, 0]})" "\n"),
            "<path>:1: loss_mask selects no target token (position 0 is never one) (allowed: rows whose loss_mask "
            "has a 1 at some position after the first)");
}

TEST_F(JsonlRows, AFieldNothingReadsIsRefusedByNameUnlessIgnored) {
  const std::string misspelt = R"({"input_ids": [5, 6, 7], "loss_msk": [0, 0, 1]})" "\n";
  EXPECT_EQ(error(misspelt), "<path>:1: unknown field \"loss_msk\" (allowed: input_ids, loss_mask, attention_mask, "
                             "length (or data.unknown_fields = \"ignore\" to skip others))");
  JsonlOptions ignore;
  ignore.unknown_fields = "ignore";
  EXPECT_EQ(load(misspelt, ignore)[0].loss_mask, std::vector<float>({0, 1, 1}));  // documented: skipped unread
  EXPECT_TRUE(load(misspelt, ignore)[0].extras.empty());

  // A loss input of another loss is refused even with "ignore": the run would silently train another objective.
  ignore.other_loss_inputs = {{"advantages", "loss.type = ppo"}};
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "advantages": [1, 1, 1]})" "\n", ignore),
            "<path>:1: \"advantages\" is read only under loss.type = ppo; this run's loss.type = sft does not read "
            "it (allowed: input_ids, loss_mask, attention_mask, length (or data.unknown_fields = \"ignore\"))");
}

TEST_F(JsonlRows, LossInputsAreRequiredFiniteAndInRange) {
  const JsonlOptions ppo = ppo_options();
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "old_log_probs": [0, -1, -1]})" "\n", ppo),
            "<path>:1: loss.type = ppo reads \"advantages\", which this row lacks (allowed: rows with "
            "old_log_probs, advantages)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "old_log_probs": [0, 0.5, -1], "advantages": [1, 1, 1]})" "\n", ppo),
            "<path>:1: old_log_probs[1] = 0.5 is out of range (allowed: finite numbers <= 0 (log-probabilities))");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "old_log_probs": [0, -1, -1], "advantages": [1, 1e39, 1]})" "\n", ppo),
            "<path>:1: advantages[1] = 1e+39 is out of range (allowed: finite float32 numbers)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "old_log_probs": [0, -1, -1], "advantages": [1, 1, 1], )"
                  R"("returns": [1, 1, 1]})" "\n",
                  ppo),
            "<path>:1: \"returns\" is read only under loss.type = value; this run's loss.type = ppo does not read it "
            "(allowed: input_ids, loss_mask, attention_mask, length, old_log_probs, advantages (or "
            "data.unknown_fields = \"ignore\"))");
  // A validation row may leave them out (evaluation reads none), and its values are checked, then dropped.
  JsonlOptions val = ppo;
  val.require_loss_inputs = false;
  auto data = open_dataset(write("val.jsonl", R"({"input_ids": [5, 6, 7], "advantages": [1, 1, 1]})" "\n"
                                              R"({"input_ids": [5, 6, 7]})" "\n"),
                           "val", 64, 3, 0, 1, limits_, val);
  EXPECT_TRUE(data->get(0).extras.empty());
  EXPECT_EQ(error(R"({"input_ids": [5, 6, 7], "advantages": [1, "x", 1]})" "\n", val),
            "<path>:1: advantages[1] = \"x\" is out of range (allowed: finite float32 numbers)");
}

// Found by the data_jsonl fuzz target: printing a value nested 100000 deep overflowed the stack.
TEST_F(JsonlRows, DeepNestingIsRefusedBeforeItIsPrinted) {
  EXPECT_EQ(error("{\"input_ids\": " + std::string(100000, '[') + "\n"),
            "<path>:1: JSON nested deeper than 8 levels (allowed: an object of per-token arrays of numbers)");
}

TEST_F(JsonlRows, TokenIdsBeyondInt64AreNamedAsWritten) {
  EXPECT_EQ(error(R"({"input_ids": [5, 18446744073709551615, 7]})" "\n"),
            "<path>:1: input_ids[1] = 18446744073709551615 is not a token id (allowed: integers 0..99)");
  EXPECT_EQ(error(R"({"input_ids": [5, 6.5, 7]})" "\n"),
            "<path>:1: input_ids[1] = 6.5 is not a token id (allowed: integers 0..99)");
}

TEST_F(JsonlRows, ARowLongerThanMaxLengthIsRefusedOrCutAsTruncationSays) {
  const std::string row = R"({"input_ids": [1, 2, 3, 4, 5, 6], "loss_mask": [0, 1, 0, 0, 1, 1], )"
                          R"("attention_mask": [1, 1, 1, 1, 1, 1]})" "\n";
  EXPECT_EQ(error(row, {}, 4),
            "<path>:1: a row of 6 tokens is longer than data.max_length = 4 (allowed: rows of at most 4 tokens, or "
            "data.truncation = \"left\" / \"right\" to cut longer ones)");
  JsonlOptions right;
  right.truncation = "right";
  const Example kept_first = load(row, right, 4)[0];
  EXPECT_EQ(kept_first.input_ids, std::vector<int64_t>({1, 2, 3, 4}));
  EXPECT_EQ(kept_first.loss_mask, std::vector<float>({0, 1, 0, 0}));
  JsonlOptions left;
  left.truncation = "left";
  const Example kept_last = load(row, left, 4)[0];
  EXPECT_EQ(kept_last.input_ids, std::vector<int64_t>({3, 4, 5, 6}));
  EXPECT_EQ(kept_last.loss_mask, std::vector<float>({0, 0, 1, 1}));
  // Padding goes before the length is compared: 4 real tokens fit.
  EXPECT_EQ(load(R"({"input_ids": [1, 2, 3, 4, 0, 0], "length": 4})" "\n", {}, 4)[0].input_ids.size(), 4u);
  // A cut that leaves no target is named with the cut.
  EXPECT_EQ(error(R"({"input_ids": [1, 2, 3, 4, 5, 6], "loss_mask": [0, 1, 0, 0, 0, 0]})" "\n", left, 4),
            "<path>:1: loss_mask selects no target token after data.truncation = \"left\" cut it to 4 tokens "
            "(position 0 is never one) (allowed: rows whose loss_mask has a 1 at some position after the first)");
}

}  // namespace
}  // namespace enginery
