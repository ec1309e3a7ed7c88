#include "trainer/preflight.h"

#include "host_api/error.h"
#include "models/model_args.h"
#include "trainer/dataset.h"

namespace enginery {
namespace {

int64_t model_vocab_size(const ModelConfig& model) {
  const std::string prefix = "builtin:";
  if (model.path.rfind(prefix, 0) == 0) return models::builtin_args(model.path.substr(prefix.size())).vocab_size;
  return models::read_hf_config(model.path).vocab_size;
}

}  // namespace

void preflight_data(const TrainConfig& c, int64_t world_size) {
  if (c.data.train_batch_size % world_size != 0) {
    throw EngineryError("data.train_batch_size = " + std::to_string(c.data.train_batch_size) +
                            " does not divide over " + std::to_string(world_size) + " ranks",
                        c.where("data.train_batch_size"), "a multiple of the number of ranks");
  }
  auto train = open_dataset(c.data.train_files, "train", c.data.max_length, c.data.digits, c.data.train_size,
                            static_cast<uint64_t>(c.data.seed));
  if (train->size() < c.data.train_batch_size) {
    throw EngineryError(train->describe() + " holds fewer examples than one batch", c.where("data.train_batch_size"));
  }
  if (!c.data.val_files.empty()) {
    open_dataset(c.data.val_files, "val", c.data.max_length, c.data.digits, c.data.val_size,
                 static_cast<uint64_t>(c.data.seed));
  }
  const int64_t vocab = model_vocab_size(c.model);
  if (is_builtin_addition(c.data.train_files) && vocab < AdditionTask::kVocabSize) {
    throw EngineryError("the addition task needs " + std::to_string(AdditionTask::kVocabSize) +
                            " token ids, the model has a vocabulary of " + std::to_string(vocab),
                        c.where("model.path"));
  }
}

}  // namespace enginery
