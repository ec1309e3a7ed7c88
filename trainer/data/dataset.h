#pragma once
// Training data: indexable datasets (the built-in addition task, .jsonl rows, nanoGPT .bin token files), a
// deterministic per-rank sampler, and collation into a Batch (host_api/batch.h alignment).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/data_sources.h"
#include "config/model_limits.h"
#include "host_api/batch.h"
#include "trainer/data/addition_task.h"

namespace enginery {

struct Example {
  std::vector<int64_t> input_ids;
  std::vector<float> loss_mask;  // loss_mask[t] = 1: token t is a target; loss_mask[0] is always 0
  std::map<std::string, std::vector<float>> extras;  // per-token floats: old_log_probs, advantages, returns, values
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  virtual std::string describe() const = 0;
};

// How .jsonl rows are read (README.md, "Data files"; trainer/data/jsonl_row.h checks each row against it).
struct JsonlOptions {
  // The per-token float arrays the loss reads (trainer/loop/losses.h required_inputs): every training row carries
  // them; a validation row may (evaluation reads none of them, so they are checked, then dropped).
  std::vector<std::string> loss_inputs;
  bool require_loss_inputs = true;
  std::string loss_name = "loss.type = sft";  // for messages
  // Per-token arrays another loss reads -> that loss ("loss.type = ppo"), so a row carrying one is refused with
  // the reason rather than as an unknown name.
  std::map<std::string, std::string> other_loss_inputs;
  // data.truncation, verl's SFT dataset knob: a row longer than data.max_length is an error, or loses its first
  // ("left") or last ("right") tokens.
  std::string truncation = "error";
  // data.unknown_fields: a field outside the schema is an error, or ("ignore") skipped unread.
  std::string unknown_fields = "error";
};

// `spec`: "builtin:addition", a .jsonl file or a .bin file (only regular files are opened: a FIFO would block).
// `split` is "train" or "val" (the builtin task's held-out pairs). Throws EngineryError naming the file (and line
// for .jsonl).
std::unique_ptr<Dataset> open_dataset(const std::string& spec, const std::string& split, int64_t max_length,
                                      int64_t digits, int64_t builtin_size, uint64_t seed,
                                      const TokenLimits& limits = {}, const JsonlOptions& jsonl = {});

// Shared by the readers: an id outside [0, vocab_size) and a sequence longer than max_positions are errors naming
// `where` (`what`: "a row", "an example", ...).
void check_token_id(int64_t id, const TokenLimits& limits, const std::string& where);
void check_sequence_length(int64_t length, const TokenLimits& limits, const std::string& where,
                           const std::string& what);

// Throws EngineryError naming `path` unless it is a regular file (or a link to one): std::ifstream blocks forever
// on a FIFO and reads nothing from a directory, so every data or token file is checked before it is opened.
void require_regular_file(const std::string& path, const std::string& allowed);

// Which examples rank `rank` trains on at each global step. The global batch of step s is the same for every
// world size: epoch e = s / steps_per_epoch is a permutation of the dataset seeded by (seed, e); step s takes the
// next train_batch_size indices of it (the incomplete tail is dropped); rank r takes its contiguous slice of
// train_batch_size / world_size. So the data position is just the global step.
class ShardedSampler {
 public:
  ShardedSampler(int64_t dataset_size, int64_t global_batch_size, int64_t rank, int64_t world_size, uint64_t seed,
                 bool shuffle);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t local_batch_size() const { return global_batch_size_ / world_size_; }
  int64_t epoch_of(int64_t global_step) const { return global_step / steps_per_epoch_; }
  std::vector<int64_t> indices(int64_t global_step);

 private:
  void build_epoch(int64_t epoch);

  int64_t dataset_size_;
  int64_t global_batch_size_;
  int64_t rank_;
  int64_t world_size_;
  uint64_t seed_;
  bool shuffle_;
  int64_t steps_per_epoch_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;
};

// Right-pads to the longest example: input_ids (pad 0), attention_mask, loss_mask, and every extra.
Batch collate(const std::vector<Example>& examples);

}  // namespace enginery
