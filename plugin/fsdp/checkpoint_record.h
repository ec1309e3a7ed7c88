#pragma once
// What each rank reports after writing its checkpoint files (plugin/fsdp/CHECKPOINT.md, "The rank record"): per
// kind of per-rank file, whether the rank wrote one, its size, the shard rank whose ranges it holds and its sha256.
// Every rank needs every record (all agree on success, rank 0 writes metadata.json from them), so they travel in
// one all-gather as int64 words, a dtype every backend moves bit for bit. Only to_words and record_from_words know
// the word layout; nothing here reaches the disk.
#include <torch/torch.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "plugin/fsdp/collectives.h"

namespace enginery {
namespace fsdp {
namespace ckpt {

// The per-rank files of a checkpoint, in record order.
enum class FileKind { kModel, kOptimizer, kExtra };
constexpr std::array<FileKind, 3> kFileKinds = {FileKind::kModel, FileKind::kOptimizer, FileKind::kExtra};

struct FileRecord {
  bool written = false;  // false: no file of this kind from this rank (the other fields stay empty)
  uint64_t bytes = 0;
  int64_t shard_rank = 0;  // whose shard ranges the file holds (model and optimizer files)
  std::string sha256;      // 64 lowercase hex digits, as FileWriter::finish returns and metadata.json stores them

  // A written file; throws EngineryError when `sha256` is not 64 digits, so that to_words, which runs just before
  // a collective, never has to.
  static FileRecord written_file(uint64_t bytes, std::string sha256, int64_t shard_rank);
};

struct RankRecord {
  std::array<FileRecord, kFileKinds.size()> files;  // indexed by FileKind

  FileRecord& operator[](FileKind kind) { return files[static_cast<size_t>(kind)]; }
  const FileRecord& operator[](FileKind kind) const { return files[static_cast<size_t>(kind)]; }
};

// Words of one RankRecord: per FileKind in order, 67 words: written (0 or 1), bytes, shard_rank, then the 64
// characters of sha256, one per word (all 0 when not written).
constexpr int64_t kSha256Digits = 64;
constexpr int64_t kFileRecordWords = 3 + kSha256Digits;
constexpr int64_t kRankRecordWords = static_cast<int64_t>(kFileKinds.size()) * kFileRecordWords;

// Writes kRankRecordWords words at `words`. Never throws.
void to_words(const RankRecord& record, int64_t* words);
// Reads kRankRecordWords words at `words`.
RankRecord record_from_words(const int64_t* words);

// Collective over `world` (every rank calls it, whatever its own outcome): every rank's record, indexed by world
// rank. The words travel on `device` (NCCL moves device tensors only).
std::vector<RankRecord> all_gather_records(const Collectives& world, const RankRecord& mine,
                                           const torch::Device& device);

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
