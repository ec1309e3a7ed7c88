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

// One mapped file. Tensors it hands out view the mapping (read-only memory: clone before writing into them) and keep
// it alive.
class SafetensorsFile {
 public:
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
  struct Entry {
    c10::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
  };
  std::string path_;
  std::shared_ptr<void> mapping_;  // munmap on release
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the byte buffer after the header
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of a HF model directory: model.safetensors, or the shards named by model.safetensors.index.json.
// Tensors view the mappings (read-only).
NamedTensors read_safetensors_dir(const std::string& dir);

// Writes `tensors` (contiguous CPU copies are made as needed) in the given order to one file.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes model.safetensors, or, when the tensors exceed max_shard_bytes (> 0), shards
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json, as transformers' save_pretrained does.
void write_safetensors_dir(const std::string& dir, const NamedTensors& tensors, int64_t max_shard_bytes);

}  // namespace models
}  // namespace enginery
