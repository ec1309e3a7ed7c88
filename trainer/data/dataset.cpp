#include "trainer/data/dataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "host_api/error.h"
#include "trainer/data/jsonl_row.h"

namespace enginery {
namespace {

class AdditionDataset : public Dataset {
 public:
  AdditionDataset(int64_t digits, uint64_t seed, int64_t size, bool val, const TokenLimits& limits)
      : task_(digits, seed), size_(size), val_(val) {
    if (limits.vocab_size > 0 && limits.vocab_size < AdditionTask::kVocabSize) {
      throw EngineryError("the addition task needs " + std::to_string(AdditionTask::kVocabSize) +
                              " token ids, the vocabulary of " + limits.model + " has " +
                              std::to_string(limits.vocab_size),
                          "builtin:addition");
    }
    check_sequence_length(task_.seq_len(), limits, "builtin:addition, data.digits = " + std::to_string(digits),
                 "an example");
  }
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override {
    auto [a, b] = val_ ? task_.val_pair(index) : task_.train_pair(index);
    return Example{task_.tokens(a, b), task_.loss_mask(), {}};
  }
  std::string describe() const override {
    return "builtin:addition (" + std::to_string(task_.digits()) + " digits, " + std::to_string(size_) + " " +
           (val_ ? "held-out" : "training") + " examples of " + std::to_string(task_.seq_len()) + " tokens)";
  }

 private:
  AdditionTask task_;
  int64_t size_;
  bool val_;
};

constexpr int kMaxRowDepth = 8;

// One JSON object per line, each checked by parse_jsonl_row (trainer/data/jsonl_row.h).
class JsonlDataset : public Dataset {
 public:
  JsonlDataset(const std::string& path, int64_t max_length, const TokenLimits& limits, const JsonlOptions& options)
      : path_(path) {
    require_regular_file(path, "a .jsonl file");
    std::ifstream in(path);
    if (!in) throw EngineryError("cannot open data file", path);
    std::string line;
    for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = path + ":" + std::to_string(line_no);
      nlohmann::json row;
      try {
        // Printing or copying a JSON value recurses once per nesting level: a row nested 100000 deep would
        // overflow the stack. A row nests 2 levels (an object of arrays).
        row = nlohmann::json::parse(line, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
          if (depth > kMaxRowDepth) {
            throw EngineryError("JSON nested deeper than " + std::to_string(kMaxRowDepth) + " levels", where,
                                "an object of per-token arrays of numbers");
          }
          return true;
        });
      } catch (const nlohmann::json::exception& e) {
        throw EngineryError(std::string("invalid JSON: ") + e.what(), where);
      }
      rows_.push_back(parse_jsonl_row(row, where, max_length, limits, options));
    }
    if (rows_.empty()) throw EngineryError("no examples", path);
  }
  int64_t size() const override { return static_cast<int64_t>(rows_.size()); }
  Example get(int64_t index) const override { return rows_.at(index); }
  std::string describe() const override { return path_ + " (" + std::to_string(rows_.size()) + " rows)"; }

 private:
  std::string path_;
  std::vector<Example> rows_;
};

// nanoGPT's format: a flat file of uint16 token ids. Example i is the window [i*L, (i+1)*L), every token but the
// first a target.
class BinDataset : public Dataset {
 public:
  BinDataset(const std::string& path, int64_t window, const TokenLimits& limits)
      : path_(path), window_(window), limits_(limits) {
    require_regular_file(path, "a .bin file of uint16 token ids");
    check_sequence_length(window, limits, path, "data.max_length, the window");
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw EngineryError("cannot open data file", path);
    num_tokens_ = static_cast<int64_t>(in.tellg()) / 2;
    if (num_tokens_ < window_) {
      throw EngineryError("holds " + std::to_string(num_tokens_) + " tokens, fewer than data.max_length = " +
                              std::to_string(window_),
                          path);
    }
  }
  int64_t size() const override { return num_tokens_ / window_; }
  Example get(int64_t index) const override {
    std::ifstream in(path_, std::ios::binary);
    in.seekg(index * window_ * 2);
    std::vector<uint16_t> raw(window_);
    in.read(reinterpret_cast<char*>(raw.data()), window_ * 2);
    if (!in) throw EngineryError("short read at example " + std::to_string(index), path_);
    Example ex;
    ex.input_ids.assign(raw.begin(), raw.end());
    for (int64_t t = 0; t < window_; ++t) {
      // Only read windows are checked: scanning a multi-GB token file up front would cost more than the check.
      if (limits_.vocab_size > 0 && ex.input_ids[t] >= limits_.vocab_size) {
        check_token_id(ex.input_ids[t], limits_,
                       path_ + ": token " + std::to_string(index * window_ + t) + " (example " +
                           std::to_string(index) + ")");
      }
    }
    ex.loss_mask.assign(window_, 1.0f);
    ex.loss_mask[0] = 0.0f;
    return ex;
  }
  std::string describe() const override {
    return path_ + " (" + std::to_string(num_tokens_) + " tokens, " + std::to_string(size()) + " windows of " +
           std::to_string(window_) + ")";
  }

 private:
  std::string path_;
  int64_t window_;
  TokenLimits limits_;
  int64_t num_tokens_ = 0;
};

}  // namespace

void check_token_id(int64_t id, const TokenLimits& limits, const std::string& where) {
  const bool too_big = limits.vocab_size > 0 && id >= limits.vocab_size;
  if (id < 0 || too_big) {
    const std::string vocab = limits.vocab_size > 0 ? std::to_string(limits.vocab_size) : "?";
    throw EngineryError("token id " + std::to_string(id) + " is outside the vocabulary of " + vocab + " ids of " +
                            limits.model,
                        where, "0.." + (limits.vocab_size > 0 ? std::to_string(limits.vocab_size - 1) : "vocab-1"));
  }
}

void check_sequence_length(int64_t length, const TokenLimits& limits, const std::string& where,
                           const std::string& what) {
  if (limits.max_positions > 0 && length > limits.max_positions) {
    throw EngineryError(what + " of " + std::to_string(length) + " tokens is longer than max_position_embeddings = " +
                            std::to_string(limits.max_positions) + " of " + limits.model,
                        where, "sequences of at most " + std::to_string(limits.max_positions) + " tokens");
  }
}

void require_regular_file(const std::string& path, const std::string& allowed) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw EngineryError("no such file", path, allowed);
  if (!std::filesystem::is_regular_file(status)) {
    throw EngineryError("not a regular file (a FIFO, directory or device is never read)", path, allowed);
  }
}

std::unique_ptr<Dataset> open_dataset(const std::string& spec, const std::string& split, int64_t max_length,
                                      int64_t digits, int64_t builtin_size, uint64_t seed,
                                      const TokenLimits& limits, const JsonlOptions& jsonl) {
  if (is_builtin_addition(spec)) {
    return std::make_unique<AdditionDataset>(digits, seed, builtin_size, split == "val", limits);
  }
  if (is_jsonl(spec)) return std::make_unique<JsonlDataset>(spec, max_length, limits, jsonl);
  if (is_token_file(spec)) return std::make_unique<BinDataset>(spec, max_length, limits);
  throw EngineryError("unknown data source '" + spec + "'", "data." + split + "_files",
                      kDataSourcesAllowed);
}

ShardedSampler::ShardedSampler(int64_t dataset_size, int64_t global_batch_size, int64_t rank, int64_t world_size,
                               uint64_t seed, bool shuffle)
    : dataset_size_(dataset_size),
      global_batch_size_(global_batch_size),
      rank_(rank),
      world_size_(world_size),
      seed_(seed),
      shuffle_(shuffle),
      steps_per_epoch_(dataset_size / global_batch_size) {
  if (global_batch_size % world_size != 0) {
    throw EngineryError("data.train_batch_size = " + std::to_string(global_batch_size) +
                            " is not divisible by the world size " + std::to_string(world_size),
                        "data.train_batch_size", "a multiple of the number of ranks");
  }
  if (steps_per_epoch_ == 0) {
    throw EngineryError("the dataset has " + std::to_string(dataset_size) + " examples, fewer than one batch of " +
                            std::to_string(global_batch_size),
                        "data.train_batch_size");
  }
}

void ShardedSampler::build_epoch(int64_t epoch) {
  order_.resize(dataset_size_);
  for (int64_t i = 0; i < dataset_size_; ++i) order_[i] = i;
  if (shuffle_) {
    // Fisher-Yates with mix64, so the order is the same on every platform and standard library.
    uint64_t state = mix64(seed_ * 0x100000001b3ULL + static_cast<uint64_t>(epoch));
    for (int64_t i = dataset_size_ - 1; i > 0; --i) {
      state = mix64(state);
      const int64_t j = static_cast<int64_t>(state % static_cast<uint64_t>(i + 1));
      std::swap(order_[i], order_[j]);
    }
  }
  cached_epoch_ = epoch;
}

std::vector<int64_t> ShardedSampler::indices(int64_t global_step) {
  const int64_t epoch = epoch_of(global_step);
  if (epoch != cached_epoch_) build_epoch(epoch);
  const int64_t local = local_batch_size();
  const int64_t begin = (global_step % steps_per_epoch_) * global_batch_size_ + rank_ * local;
  return std::vector<int64_t>(order_.begin() + begin, order_.begin() + begin + local);
}

Batch collate(const std::vector<Example>& examples) {
  const int64_t n = static_cast<int64_t>(examples.size());
  int64_t len = 0;
  for (const auto& ex : examples) len = std::max<int64_t>(len, static_cast<int64_t>(ex.input_ids.size()));
  auto ids = torch::zeros({n, len}, torch::kLong);
  auto attention = torch::zeros({n, len}, torch::kLong);
  auto mask = torch::zeros({n, len}, torch::kFloat);
  std::map<std::string, torch::Tensor> extras;
  for (const auto& [name, values] : examples.empty() ? std::map<std::string, std::vector<float>>{}
                                                     : examples.front().extras) {
    extras[name] = torch::zeros({n, len}, torch::kFloat);
  }
  auto ids_a = ids.accessor<int64_t, 2>();
  auto att_a = attention.accessor<int64_t, 2>();
  auto mask_a = mask.accessor<float, 2>();
  for (int64_t b = 0; b < n; ++b) {
    const Example& ex = examples[b];
    for (size_t t = 0; t < ex.input_ids.size(); ++t) {
      ids_a[b][t] = ex.input_ids[t];
      att_a[b][t] = 1;
      mask_a[b][t] = t == 0 ? 0.0f : ex.loss_mask[t];
    }
    for (auto& [name, tensor] : extras) {
      auto it = ex.extras.find(name);
      if (it == ex.extras.end()) throw EngineryError("example lacks \"" + name + "\" that others in its batch have");
      auto acc = tensor.accessor<float, 2>();
      for (size_t t = 0; t < it->second.size(); ++t) acc[b][t] = it->second[t];
    }
  }
  Batch batch;
  batch.set("input_ids", ids);
  batch.set("attention_mask", attention);
  batch.set("loss_mask", mask);
  for (auto& [name, tensor] : extras) batch.set(name, tensor);
  return batch;
}

}  // namespace enginery
