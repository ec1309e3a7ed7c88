#pragma once
// safetensors reading (memory-mapped) and writing, single files and sharded checkpoints with
// model.safetensors.index.json. Dtypes: F32, BF16, F16 (what HF checkpoints of these models hold), and I64 for data
// files (token ids, masks).
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace enginery {
namespace models {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// One tensor of a safetensors header: its bytes are [begin, end) of the data section that follows the header.
struct SafetensorsEntry {
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;  // file offset of the data section: 8 + the header's length
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  // __metadata__ (string values)
};

// Parses and checks the header of a safetensors file whose whole content is `bytes` (`size` bytes; only the header
// is read, the size bounds the offsets): header length within the file, a JSON object, known dtypes, non-negative
// dims whose product and byte size fit int64, data_offsets inside the data section with begin <= end and
// end - begin == numel * itemsize, no two tensors sharing a byte. Anything else throws EngineryError naming
// `path` and the tensor, never another exception type. The entry point for fuzzing the format.
SafetensorsHeader parse_safetensors_header(const void* bytes, size_t size, const std::string& path);

// One mapped file. Tensors it hands out view the mapping (read-only memory: clone before writing into them) and keep
// it alive.
class SafetensorsFile {
 public:
  // Only a regular file is opened (a FIFO is refused, never waited on); its header is checked as
  // parse_safetensors_header does.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // in file order (by data offset)
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  torch::Tensor tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::shared_ptr<void> mapping_;  // munmap on release
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the byte buffer after the header
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of a HF model directory: model.safetensors, or the shards named by model.safetensors.index.json
// (names inside `dir` only: absolute names and '..' are refused). Tensors view the mappings (read-only).
NamedTensors read_safetensors_dir(const std::string& dir);

// Writes `tensors` (contiguous CPU copies are made as needed) in the given order to one file.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes model.safetensors, or, when the tensors exceed max_shard_bytes (> 0), shards
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json, as transformers' save_pretrained does.
void write_safetensors_dir(const std::string& dir, const NamedTensors& tensors, int64_t max_shard_bytes);

}  // namespace models
}  // namespace enginery
