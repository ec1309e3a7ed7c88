// Incremental decoding with the KV cache (models/generation.h): every step's logits equal a full forward's without
// a cache (the training path) for all three architectures, with left padding and sequences stopping mid-way;
// greedy picks their argmax; sampling repeats for a seed; top-k / top-p keep what they should; and greedy
// decoding matches transformers' generate() on the parity fixtures (scripts/gpu/make_generate_fixture.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "host_api/error.h"
#include "models/generation.h"
#include "models/kv_cache.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

using testing::builtin;
using testing::full_forward_logits;

const std::vector<std::string> kArchitectures = {"llama-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3-moe-tiny"};

struct Prompts {
  torch::Tensor ids, mask;  // [B, P] left-padded
};

// Random prompts of `lengths`, left-padded to the longest (pad id 0, as the generation results use).
Prompts left_padded(const std::vector<int64_t>& lengths, int64_t vocab, uint64_t seed) {
  const int64_t b = static_cast<int64_t>(lengths.size());
  const int64_t p = *std::max_element(lengths.begin(), lengths.end());
  auto gen = compat::make_generator(torch::kCPU, seed);
  Prompts out{torch::zeros({b, p}, torch::kLong), torch::zeros({b, p}, torch::kLong)};
  for (int64_t i = 0; i < b; ++i) {
    const int64_t len = lengths[i];
    out.ids[i].narrow(0, p - len, len).copy_(at::randint(1, vocab, {len}, gen, torch::kLong));
    out.mask[i].narrow(0, p - len, len).fill_(1);
  }
  return out;
}

// Decodes greedily by hand through forward_cached and checks every step's logits against the full forward. Row 1
// stops after its third token (then pad with mask 0, as generate() does after eos).
void expect_cached_matches_full(CausalLM& model) {
  torch::NoGradGuard no_grad;
  const auto prompts = left_padded({5, 2, 7}, model.args().vocab_size, 7);
  const int64_t b = 3, p = prompts.ids.size(1), steps = 6;
  KVCache cache(model.args(), b, p + steps, model.output_embedding_weight().options());
  auto ids = prompts.ids, mask = prompts.mask;
  auto hidden = model.forward_cached(ids, mask, cache);
  EXPECT_EQ(cache.length(), p);
  for (int64_t step = 0; step < steps; ++step) {
    auto cached = model.next_token_logits(hidden.select(1, hidden.size(1) - 1));
    auto full = full_forward_logits(model, ids, mask);
    ASSERT_EQ(cached.sizes(), full.sizes());
    EXPECT_LT((cached - full).abs().max().item<double>(), 1e-5) << model.hf_model_type() << " step " << step;
    auto next = cached.argmax(-1);
    auto real = torch::ones({b, 1}, torch::kLong);
    if (step >= 3) {
      next[1] = 0;
      real[1][0] = 0;
    }
    ids = torch::cat({ids, next.unsqueeze(1)}, 1);
    mask = torch::cat({mask, real}, 1);
    hidden = model.forward_cached(next.unsqueeze(1), mask, cache);
  }
}

TEST(Generation, CachedLogitsEqualFullForwardAtEveryStep) {
  for (const auto& name : kArchitectures) {
    SCOPED_TRACE(name);
    expect_cached_matches_full(*builtin(name));
  }
}

// The response of row i of `r`: its generated tokens up to its length.
std::vector<int64_t> response(const GenerationResult& r, int64_t i) {
  const int64_t p = r.sequences.size(1) - r.response_mask.size(1);
  auto row = r.sequences[i].narrow(0, p, r.response_lengths[i].item<int64_t>()).contiguous();
  return {row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()};
}

int64_t first_index(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) - v.begin();
}

// Every generated token of a running row is the argmax of a full forward over what precedes it; rows stop at
// their first eos and hold pad (mask 0) after it.
void expect_greedy_is_full_forward_argmax(CausalLM& model, const GenerationResult& r, const SamplingParams& sp) {
  const int64_t b = r.sequences.size(0), n = r.response_mask.size(1), p = r.sequences.size(1) - n;
  for (int64_t j = 0; j < n; ++j) {
    auto argmax = full_forward_logits(model, r.sequences.narrow(1, 0, p + j), r.attention_mask.narrow(1, 0, p + j))
                      .argmax(-1);
    for (int64_t i = 0; i < b; ++i) {
      const bool running = j < r.response_lengths[i].item<int64_t>();
      EXPECT_EQ(r.response_mask[i][j].item<int64_t>(), running ? 1 : 0) << i << " " << j;
      EXPECT_EQ(r.sequences[i][p + j].item<int64_t>(), running ? argmax[i].item<int64_t>() : sp.pad_token_id)
          << "row " << i << " step " << j;
    }
  }
  for (int64_t i = 0; i < b; ++i) {
    auto resp = response(r, i);
    for (size_t k = 0; k + 1 < resp.size(); ++k) EXPECT_NE(resp[k], sp.eos_token_id) << "row " << i << " went on";
    if (static_cast<int64_t>(resp.size()) < n) EXPECT_EQ(resp.back(), sp.eos_token_id) << "row " << i;
  }
}

TEST(Generation, GreedyTokensAreTheArgmaxOfFullForwardsAndStopAtEos) {
  for (const auto& name : kArchitectures) {
    SCOPED_TRACE(name);
    auto model = builtin(name);
    const auto prompts = left_padded({6, 1, 3, 4}, model->args().vocab_size, 3);
    SamplingParams sp;
    sp.greedy = true;
    sp.max_new_tokens = 8;
    sp.pad_token_id = 0;
    auto free_run = generate(*model, prompts.ids, prompts.mask, sp);
    ASSERT_EQ(free_run.sequences.size(1), prompts.ids.size(1) + 8);
    EXPECT_TRUE(free_run.response_lengths.eq(8).all().item<bool>());
    expect_greedy_is_full_forward_argmax(*model, free_run, sp);
    // Row 0's third token as eos: row 0 stops at its first occurrence, the others where (if) they emit it.
    const auto row0 = response(free_run, 0);
    sp.eos_token_id = row0[2];
    auto stopped = generate(*model, prompts.ids, prompts.mask, sp);
    EXPECT_EQ(stopped.response_lengths[0].item<int64_t>(), first_index(row0, sp.eos_token_id) + 1);
    expect_greedy_is_full_forward_argmax(*model, stopped, sp);
    // Only the rows of the batch stopped: N shrinks to the longest response.
    EXPECT_EQ(stopped.response_mask.size(1), stopped.response_lengths.max().item<int64_t>());
  }
}

TEST(Generation, StopsEarlyWhenEverySequenceEnded) {
  auto model = builtin("qwen2-tiny");
  const auto prompts = left_padded({4}, model->args().vocab_size, 5);
  SamplingParams sp;
  sp.greedy = true;
  sp.max_new_tokens = 10;
  auto free_run = generate(*model, prompts.ids, prompts.mask, sp);
  const auto row = response(free_run, 0);
  sp.eos_token_id = row[1];
  const int64_t len = first_index(row, sp.eos_token_id) + 1;
  auto stopped = generate(*model, prompts.ids, prompts.mask, sp);
  EXPECT_EQ(stopped.sequences.size(1), 4 + len);
  EXPECT_EQ(stopped.response_lengths[0].item<int64_t>(), len);
  EXPECT_TRUE(stopped.attention_mask.all().item<bool>());
  EXPECT_TRUE(stopped.sequences.equal(free_run.sequences.narrow(1, 0, 4 + len)));
}

GenerationResult sample(CausalLM& model, const Prompts& prompts, SamplingParams sp) {
  sp.max_new_tokens = 8;
  return generate(model, prompts.ids, prompts.mask, sp);
}

TEST(Generation, SamplingRepeatsForASeedAndDiffersAcrossSeeds) {
  auto model = builtin("llama-tiny");
  const auto prompts = left_padded({5, 3, 8}, model->args().vocab_size, 11);
  SamplingParams sp;
  sp.temperature = 1.5;
  sp.seed = 1;
  auto a = sample(*model, prompts, sp);
  auto again = sample(*model, prompts, sp);
  EXPECT_TRUE(a.sequences.equal(again.sequences));
  sp.seed = 2;
  auto other = sample(*model, prompts, sp);
  EXPECT_FALSE(a.sequences.equal(other.sequences));
  sp.greedy = true;
  EXPECT_FALSE(a.sequences.equal(sample(*model, prompts, sp).sequences));  // really sampled, not argmax
}

TEST(Generation, TopKOneAndTinyTopPAreGreedy) {
  for (const auto& name : kArchitectures) {
    SCOPED_TRACE(name);
    auto model = builtin(name);
    const auto prompts = left_padded({5, 2, 6}, model->args().vocab_size, 13);
    SamplingParams greedy;
    greedy.greedy = true;
    const auto expected = sample(*model, prompts, greedy).sequences;
    for (uint64_t seed : {0, 1, 2}) {
      SamplingParams top_k;
      top_k.top_k = 1;
      top_k.temperature = 2.0;
      top_k.seed = seed;
      EXPECT_TRUE(sample(*model, prompts, top_k).sequences.equal(expected)) << "top_k = 1, seed " << seed;
      SamplingParams top_p;
      top_p.top_p = 1e-6;
      top_p.temperature = 2.0;
      top_p.seed = seed;
      EXPECT_TRUE(sample(*model, prompts, top_p).sequences.equal(expected)) << "top_p = 1e-6, seed " << seed;
    }
  }
}

// The first token of 256 rows of one prompt: every sample lies in the filtered set, and (for top-k) more than one
// member of it is drawn.
TEST(Generation, TopKAndTopPSampleOnlyWhatTheyKeep) {
  auto model = builtin("qwen3-tiny");
  const auto one = left_padded({6}, model->args().vocab_size, 17);
  const Prompts many{one.ids.repeat({256, 1}), one.mask.repeat({256, 1})};
  auto probs = full_forward_logits(*model, one.ids, one.mask)[0].softmax(-1);
  auto order = std::get<1>(probs.sort(-1, /*descending=*/true));
  SamplingParams sp;
  sp.max_new_tokens = 1;
  sp.top_k = 5;
  std::set<int64_t> top5;
  for (int64_t k = 0; k < 5; ++k) top5.insert(order[k].item<int64_t>());
  auto drawn = generate(*model, many.ids, many.mask, sp).sequences.select(1, 6);
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 256; ++i) seen.insert(drawn[i].item<int64_t>());
  for (auto t : seen) EXPECT_TRUE(top5.count(t)) << "top_k = 5 drew " << t;
  EXPECT_GT(seen.size(), 1u);
  // The nucleus: the most likely tokens until their mass reaches top_p.
  sp.top_k = 0;
  sp.top_p = 0.3;
  std::set<int64_t> nucleus;
  double mass = 0.0;
  for (int64_t k = 0; mass < sp.top_p; ++k) {
    nucleus.insert(order[k].item<int64_t>());
    mass += probs[order[k]].item<double>();
  }
  drawn = generate(*model, many.ids, many.mask, sp).sequences.select(1, 6);
  for (int64_t i = 0; i < 256; ++i) EXPECT_TRUE(nucleus.count(drawn[i].item<int64_t>())) << "top_p drew outside";
}

TEST(Generation, WhateverIsAtPaddingIsIgnored) {
  auto model = builtin("qwen3-tiny");
  const auto prompts = left_padded({2, 5}, model->args().vocab_size, 23);
  SamplingParams sp;
  sp.greedy = true;
  sp.pad_token_id = 7;
  auto expected = generate(*model, prompts.ids, prompts.mask, sp);
  auto odd = prompts.ids.masked_fill(prompts.mask.logical_not(), -1);
  auto r = generate(*model, odd, prompts.mask, sp);
  EXPECT_TRUE(r.sequences.equal(expected.sequences));
  EXPECT_EQ(r.sequences[0][0].item<int64_t>(), 7);
}

TEST(Generation, BadInputsAreRefusedByName) {
  auto model = builtin("qwen2-tiny");
  auto prompts = left_padded({3, 2}, model->args().vocab_size, 1);
  SamplingParams sp;
  auto message = [&](const torch::Tensor& ids, const torch::Tensor& mask, const SamplingParams& p) {
    try {
      generate(*model, ids, mask, p);
    } catch (const EngineryError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(prompts.ids, prompts.mask.flip({1}), sp).find("left-padded"), std::string::npos);
  EXPECT_NE(message(prompts.ids, torch::zeros_like(prompts.mask), sp).find("left-padded"), std::string::npos);
  auto bad_ids = prompts.ids.clone();
  bad_ids[0][2] = 256;
  EXPECT_NE(message(bad_ids, prompts.mask, sp).find("0 .. 255"), std::string::npos);
  SamplingParams cold;
  cold.temperature = 0.0;
  EXPECT_NE(message(prompts.ids, prompts.mask, cold).find("temperature"), std::string::npos);
  SamplingParams wide;
  wide.top_p = 1.5;
  EXPECT_NE(message(prompts.ids, prompts.mask, wide).find("(0, 1]"), std::string::npos);
  SamplingParams bad_pad;
  bad_pad.pad_token_id = -1;
  EXPECT_NE(message(prompts.ids, prompts.mask, bad_pad).find("pad_token_id"), std::string::npos);
  auto critic = builtin("qwen2-tiny", "value_model");
  EXPECT_THROW(generate(*critic, prompts.ids, prompts.mask, sp), EngineryError);
}

// transformers' generate(do_sample=False) on the parity fixtures, recorded by scripts/gpu/make_generate_fixture.py
// into <fixture>/generate_greedy.json.
TEST(Generation, GreedyMatchesTransformersGenerate) {
  for (const std::string name : {"hf_llama_gqa", "hf_qwen2_tied", "hf_qwen3_qknorm"}) {
    SCOPED_TRACE(name);
    const auto dir = testing::data_dir(name);
    const auto path = dir + "/generate_greedy.json";
    if (!std::filesystem::exists(path)) {
      GTEST_SKIP() << path << " is missing: run scripts/gpu/make_generate_fixture.py (needs transformers)";
    }
    const auto j = testing::read_json(path);
    const auto prompt_lists = j["prompts"].get<std::vector<std::vector<int64_t>>>();
    const auto expected = j["responses"].get<std::vector<std::vector<int64_t>>>();
    ModelConfig cfg;
    cfg.path = dir;
    auto model = std::dynamic_pointer_cast<CausalLM>(build_model(cfg, "language_model"));
    size_t p = 0;
    for (const auto& s : prompt_lists) p = std::max(p, s.size());
    auto ids = torch::zeros({static_cast<int64_t>(prompt_lists.size()), static_cast<int64_t>(p)}, torch::kLong);
    auto mask = torch::zeros_like(ids);
    for (size_t i = 0; i < prompt_lists.size(); ++i) {
      for (size_t k = 0; k < prompt_lists[i].size(); ++k) ids[i][p - prompt_lists[i].size() + k] = prompt_lists[i][k];
      mask[i].narrow(0, p - prompt_lists[i].size(), prompt_lists[i].size()).fill_(1);
    }
    SamplingParams sp;
    sp.greedy = true;
    sp.max_new_tokens = j["max_new_tokens"].get<int64_t>();
    sp.eos_token_id = j["eos_token_id"].get<int64_t>();
    sp.pad_token_id = j["pad_token_id"].get<int64_t>();
    auto r = generate(*model, ids, mask, sp);
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(response(r, i), expected[i]) << "prompt " << i;
  }
}

}  // namespace
}  // namespace models
}  // namespace enginery
