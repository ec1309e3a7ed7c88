#pragma once
// The FSDP checkpoint format (plugin/fsdp/CHECKPOINT.md): a directory with per-rank data files and metadata.json,
// written last, that names every file with its size and sha256 and maps every stored byte to a parameter (by its
// Hugging Face name) and an element range of that parameter flattened. Nothing in it depends on how the writer
// sharded, so a reader at any world size, fsdp_size or strategy finds the ranges it now owns.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace enginery {
namespace fsdp {
namespace ckpt {

constexpr const char* kFormatName = "enginery-fsdp-checkpoint";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kMetadataFile = "metadata.json";
constexpr const char* kHfDir = "huggingface";

// Per-parameter states: the fp32 master weights (in model files) and AdamW's moments (in optimizer files).
constexpr const char* kStateParam = "param";
constexpr const char* kStateExpAvg = "exp_avg";
constexpr const char* kStateExpAvgSq = "exp_avg_sq";

struct ParamInfo {
  std::string name;            // Hugging Face name
  std::vector<int64_t> shape;
  std::string dtype = "float32";
};

// Elements [begin, end) of params[param] flattened, state `state`, stored as little-endian float32 at byte
// `offset` of the file.
struct Segment {
  size_t param = 0;
  std::string state;
  int64_t begin = 0;
  int64_t end = 0;
  uint64_t offset = 0;
};

struct FileInfo {
  std::string name;     // relative to the checkpoint directory
  std::string content;  // "model" | "optimizer" | "extra"
  int64_t rank = 0;     // the world rank that wrote it
  uint64_t bytes = 0;
  std::string sha256;
  std::vector<Segment> segments;  // model and optimizer files
};

struct Metadata {
  int64_t version = kFormatVersion;
  int64_t global_step = 0;
  int64_t world_size = 1;
  int64_t fsdp_size = 1;  // ranks per shard group (== world_size without HSDP)
  std::string strategy;   // "fsdp" | "fsdp2" (the writer's; readers may use another)
  std::vector<std::string> contents;  // what was saved: model, optimizer, extra, hf_model
  std::vector<ParamInfo> params;
  std::vector<FileInfo> files;
  nlohmann::json state;   // optimizer step, lr scheduler step, grad scaler (the same on every rank)
  nlohmann::json config;  // the engine's configuration, for people (never read back)

  bool has(const std::string& content) const;
};

std::string model_file_name(int64_t rank);
std::string optim_file_name(int64_t rank);
std::string extra_file_name(int64_t rank);

nlohmann::json to_json(const Metadata& m);
// Throws EngineryError naming `where` and the field on anything malformed or of another format / version.
Metadata metadata_from_json(const nlohmann::json& j, const std::string& where);
// Reads <dir>/metadata.json; a missing file says the directory is not a complete checkpoint.
Metadata read_metadata(const std::string& dir);

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
