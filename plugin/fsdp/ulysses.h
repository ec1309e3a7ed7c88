#pragma once
// [engine.<backend>] ulysses_sequence_parallel_size (verl's FSDPEngineConfig field, its meaning; docs/ARCHITECTURE.md,
// "Sequence parallelism"): groups of that many consecutive ranks share one micro-batch, each computing a slice of
// its packed tokens ([Note: Ulysses token and head split] in models/sequence_parallel.h). Parameters stay sharded
// over the whole world, as verl's FSDP engine shards over all ranks; the data-parallel group, the one the host's
// token count and micro-batch agreement run over, is world / size ranks.
#include <memory>

#include "host_api/base_engine.h"
#include "models/sequence_parallel.h"
#include "plugin/fsdp/collectives.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

inline constexpr const char* kUlyssesSize = "ulysses_sequence_parallel_size";

// The setting (1 when absent), read and checked when the engine is built, before any work: a positive integer
// dividing the world, with model.use_remove_padding on (as verl requires). The heads are checked once the model
// exists (DecoderModel::check_sequence_parallel).
ENGINERY_FSDP_API int64_t ulysses_size_wanted(const EngineArgs& args);

// The engine's side of models::SequenceParallelGroup: the exchanges over the group's Collectives.
class ENGINERY_FSDP_API UlyssesGroup : public models::SequenceParallelGroup {
 public:
  explicit UlyssesGroup(std::shared_ptr<Collectives> group) : group_(std::move(group)) {}
  int64_t size() const override { return group_->size(); }
  int64_t rank() const override { return group_->rank(); }
  torch::Tensor all_to_all(const torch::Tensor& in) const override;
  torch::Tensor all_gather(const torch::Tensor& in) const override;

 private:
  std::shared_ptr<Collectives> group_;
};

// Throws EngineryError on every rank (all of them take part: one all-gather over `world`) when the ranks of any
// sequence group of size `size` hold different micro-batches (by checksum of input_ids and `layout`: cu_seqlens of a
// packed micro-batch, attention_mask of a padded one): each rank would train its slice of another sequence. The ranks
// of a group must get the same rows, their data-parallel rank's.
ENGINERY_FSDP_API void check_groups_share_micro_batch(const torch::Tensor& input_ids, const torch::Tensor& layout,
                                                      const Collectives& world, int64_t size,
                                                      const std::string& key);

// Rank r's groups for a sequence-parallel size s: the sequence group, ranks [r / s * s, r / s * s + s) (consecutive,
// as verl's (dp, sp) device mesh), and the data-parallel group, the ranks r' with r' % s == r % s (one rank of each
// sequence group). Each rank builds only its own two.
struct ENGINERY_FSDP_API UlyssesGroups {
  static UlyssesGroups create(const EngineArgs& args, int64_t size);
  std::shared_ptr<UlyssesGroup> sequence;
  std::shared_ptr<Collectives> data;
};

}  // namespace fsdp
}  // namespace enginery
