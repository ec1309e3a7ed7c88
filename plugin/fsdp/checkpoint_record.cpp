#include "plugin/fsdp/checkpoint_record.h"

#include <algorithm>

#include "host_api/error.h"

namespace enginery {
namespace fsdp {
namespace ckpt {
namespace {

// Word offsets inside one file's kFileRecordWords words (checkpoint_record.h).
constexpr int64_t kWrittenWord = 0;
constexpr int64_t kBytesWord = 1;
constexpr int64_t kShardRankWord = 2;
constexpr int64_t kSha256Word = 3;
static_assert(kSha256Word + kSha256Digits == kFileRecordWords, "the sha256 digits end a file's words");

int64_t* file_words(int64_t* words, FileKind kind) { return words + static_cast<int64_t>(kind) * kFileRecordWords; }
const int64_t* file_words(const int64_t* words, FileKind kind) {
  return words + static_cast<int64_t>(kind) * kFileRecordWords;
}

// `words` are all 0 on entry, so a file not written stays 0 and a digest is never read past its end.
void file_to_words(const FileRecord& file, int64_t* words) {
  if (!file.written) return;
  words[kWrittenWord] = 1;
  words[kBytesWord] = static_cast<int64_t>(file.bytes);
  words[kShardRankWord] = file.shard_rank;
  const size_t digits = std::min(file.sha256.size(), static_cast<size_t>(kSha256Digits));
  for (size_t i = 0; i < digits; ++i) words[kSha256Word + i] = static_cast<unsigned char>(file.sha256[i]);
}

FileRecord file_from_words(const int64_t* words) {
  FileRecord file;
  if (words[kWrittenWord] == 0) return file;
  file.written = true;
  file.bytes = static_cast<uint64_t>(words[kBytesWord]);
  file.shard_rank = words[kShardRankWord];
  for (int64_t i = 0; i < kSha256Digits; ++i) file.sha256 += static_cast<char>(words[kSha256Word + i]);
  return file;
}

}  // namespace

FileRecord FileRecord::written_file(uint64_t bytes, std::string sha256, int64_t shard_rank) {
  if (static_cast<int64_t>(sha256.size()) != kSha256Digits) {
    throw EngineryError("sha256 '" + sha256 + "' is not " + std::to_string(kSha256Digits) + " hex digits",
                        "fsdp checkpoint rank record");
  }
  FileRecord file;
  file.written = true;
  file.bytes = bytes;
  file.shard_rank = shard_rank;
  file.sha256 = std::move(sha256);
  return file;
}

void to_words(const RankRecord& record, int64_t* words) {
  std::fill(words, words + kRankRecordWords, 0);
  for (FileKind kind : kFileKinds) file_to_words(record[kind], file_words(words, kind));
}

RankRecord record_from_words(const int64_t* words) {
  RankRecord record;
  for (FileKind kind : kFileKinds) record[kind] = file_from_words(file_words(words, kind));
  return record;
}

std::vector<RankRecord> all_gather_records(const Collectives& world, const RankRecord& mine,
                                           const torch::Device& device) {
  auto words = torch::zeros({kRankRecordWords}, torch::kLong);
  to_words(mine, words.data_ptr<int64_t>());
  const auto options = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto all = torch::zeros({world.size() * kRankRecordWords}, options);
  world.all_gather_into(all, words.to(device));
  all = all.cpu();
  const int64_t* all_words = all.data_ptr<int64_t>();
  std::vector<RankRecord> records;
  for (int64_t r = 0; r < world.size(); ++r) records.push_back(record_from_words(all_words + r * kRankRecordWords));
  return records;
}

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
