#pragma once
// The FSDP checkpoint format (plugin/fsdp/CHECKPOINT.md): a directory with per-rank data files and metadata.json,
// written last, that names every file with its size and sha256 and maps every stored byte to a parameter (by its
// Hugging Face name) and an element range of that parameter flattened. Nothing in it depends on how the writer
// sharded, so a reader at any world size, fsdp_size or strategy finds the ranges it now owns.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "host_api/config.h"
#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {
namespace ckpt {

constexpr const char* kFormatName = "enginery-fsdp-checkpoint";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kMetadataFile = "metadata.json";
constexpr const char* kHfDir = "huggingface";

// What a checkpoint holds, by the contract's names (host_api/config.h kContent*): metadata.json's "contents". model,
// optimizer and extra are per-rank files (FileInfo::content); hf_model is the Hugging Face directory kHfDir, which
// only a save writes.
// In the order above: those held in per-rank files (what a load can read), and every content (what a save writes).
inline const std::vector<std::string>& file_contents() {
  static const std::vector<std::string> names = {kContentModel, kContentOptimizer, kContentExtra};
  return names;
}
inline const std::vector<std::string>& all_contents() {
  static const std::vector<std::string> names = {kContentModel, kContentOptimizer, kContentExtra, kContentHfModel};
  return names;
}

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
  std::string content;  // one of file_contents()
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
  std::vector<std::string> contents;  // what was saved: some of all_contents()
  std::vector<ParamInfo> params;
  std::vector<FileInfo> files;
  nlohmann::json state;   // optimizer step, lr scheduler step, grad scaler (the same on every rank)
  nlohmann::json config;  // the engine's configuration, for people (never read back)

  bool has(const std::string& content) const;
};

std::string model_file_name(int64_t rank);
std::string optim_file_name(int64_t rank);
std::string extra_file_name(int64_t rank);

ENGINERY_FSDP_API nlohmann::json to_json(const Metadata& m);
// Checks every value before returning it, so that readers may trust the result: integers in range (ranks below
// world_size, segments inside their parameter and their file, computed without overflow), file names inside the
// checkpoint directory, known contents / states / dtype, optimizer and scheduler steps >= 0, and every element of
// every parameter stored exactly once for each state the contents promise. Anything else (also another format or
// version) throws EngineryError naming `where` and the field, never another exception type.
ENGINERY_FSDP_API Metadata metadata_from_json(const nlohmann::json& j, const std::string& where);
// metadata.json's text (any bytes) to checked Metadata, as metadata_from_json; `where` names the file in errors.
// The entry point for fuzzing the format.
ENGINERY_FSDP_API Metadata parse_metadata(const std::string& text, const std::string& where);
// Reads <dir>/metadata.json (a regular file only: never blocks on a FIFO); a missing file says the directory is
// not a complete checkpoint.
ENGINERY_FSDP_API Metadata read_metadata(const std::string& dir);

// Where ranges [first, second), each inside [lo, hi], fail to cover [lo, hi) exactly once; empty ranges count for
// nothing. Coverage is checked by position, not by counting, so two copies of one half never pass for the whole.
struct TilingFault {
  int64_t element;  // the first element stored twice or in no range
  bool twice;
};
ENGINERY_FSDP_API std::optional<TilingFault> tiling_fault(std::vector<std::pair<int64_t, int64_t>> ranges, int64_t lo,
                                                          int64_t hi);

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
