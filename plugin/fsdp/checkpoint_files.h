#pragma once
// Byte-level I/O of checkpoint data files. The writer streams tensors to disk while hashing them (sha256), fsyncs
// on finish and reports every failure (ENOSPC, EFBIG under RLIMIT_FSIZE, EIO) as an EngineryError naming the file.
// The reader maps a file, checks its size and sha256 against metadata.json before handing out any byte, so a
// corrupted or truncated shard is an error naming that file, never silently wrong weights.
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "support/sha256.h"

namespace enginery {
namespace fsdp {
namespace ckpt {

class FileWriter {
 public:
  explicit FileWriter(std::string path);
  ~FileWriter();  // closes (without fsync) a file that was not finished: the error path
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // Appends the raw bytes of `t` (copied to the CPU and made contiguous first). Returns the byte offset it
  // was written at.
  uint64_t append(const torch::Tensor& t);
  uint64_t append(const void* data, size_t size);
  uint64_t bytes() const { return bytes_; }
  // fsync + close; returns the sha256 of everything appended.
  std::string finish();

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  std::unique_ptr<Sha256> sha_;
};

class MappedFile {
 public:
  // Maps `path` read-only and verifies it has `bytes` bytes and the given sha256.
  MappedFile(std::string path, uint64_t bytes, const std::string& sha256);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  // `count` float32 values at byte `offset`, as a CPU tensor viewing the mapping (read-only; valid while this
  // object lives). Throws naming the file when the range lies outside it.
  torch::Tensor floats(uint64_t offset, int64_t count) const;
  std::string text() const;  // the whole file

 private:
  std::string path_;
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
