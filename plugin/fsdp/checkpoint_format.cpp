#include "plugin/fsdp/checkpoint_format.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "host_api/error.h"

namespace enginery {
namespace fsdp {
namespace ckpt {

bool Metadata::has(const std::string& content) const {
  return std::find(contents.begin(), contents.end(), content) != contents.end();
}

std::string model_file_name(int64_t rank) { return "model_rank_" + std::to_string(rank) + ".bin"; }
std::string optim_file_name(int64_t rank) { return "optim_rank_" + std::to_string(rank) + ".bin"; }
std::string extra_file_name(int64_t rank) { return "extra_rank_" + std::to_string(rank) + ".json"; }

nlohmann::json to_json(const Metadata& m) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : m.params) params.push_back({{"name", p.name}, {"shape", p.shape}, {"dtype", p.dtype}});
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) {
    nlohmann::json segments = nlohmann::json::array();
    // Compact rows [param, state, begin, end, offset]: a large model has params x ranks x states of them.
    for (const auto& s : f.segments) segments.push_back({s.param, s.state, s.begin, s.end, s.offset});
    files.push_back({{"name", f.name},
                     {"content", f.content},
                     {"rank", f.rank},
                     {"bytes", f.bytes},
                     {"sha256", f.sha256},
                     {"segments", segments}});
  }
  return {{"format", kFormatName}, {"version", m.version},       {"global_step", m.global_step},
          {"world_size", m.world_size}, {"fsdp_size", m.fsdp_size}, {"strategy", m.strategy},
          {"contents", m.contents}, {"state", m.state},           {"config", m.config},
          {"params", params},       {"files", files}};
}

Metadata metadata_from_json(const nlohmann::json& j, const std::string& where) {
  std::string field;
  try {
    auto get = [&](const nlohmann::json& obj, const char* key) -> const nlohmann::json& {
      field = key;
      return obj.at(key);
    };
    if (get(j, "format").get<std::string>() != kFormatName) {
      throw EngineryError("not an enginery FSDP checkpoint (format '" + j.at("format").get<std::string>() + "')",
                          where, kFormatName);
    }
    Metadata m;
    m.version = get(j, "version").get<int64_t>();
    if (m.version != kFormatVersion) {
      throw EngineryError("checkpoint format version " + std::to_string(m.version) + " is not readable here", where,
                          std::to_string(kFormatVersion));
    }
    m.global_step = get(j, "global_step").get<int64_t>();
    m.world_size = get(j, "world_size").get<int64_t>();
    m.fsdp_size = get(j, "fsdp_size").get<int64_t>();
    m.strategy = get(j, "strategy").get<std::string>();
    m.contents = get(j, "contents").get<std::vector<std::string>>();
    m.state = get(j, "state");
    m.config = j.value("config", nlohmann::json::object());
    for (const auto& p : get(j, "params")) {
      m.params.push_back({get(p, "name").get<std::string>(), get(p, "shape").get<std::vector<int64_t>>(),
                          get(p, "dtype").get<std::string>()});
    }
    for (const auto& f : get(j, "files")) {
      FileInfo info;
      info.name = get(f, "name").get<std::string>();
      info.content = get(f, "content").get<std::string>();
      info.rank = get(f, "rank").get<int64_t>();
      info.bytes = get(f, "bytes").get<uint64_t>();
      info.sha256 = get(f, "sha256").get<std::string>();
      for (const auto& s : get(f, "segments")) {
        field = "segments";
        Segment seg{s.at(0).get<size_t>(), s.at(1).get<std::string>(), s.at(2).get<int64_t>(),
                    s.at(3).get<int64_t>(), s.at(4).get<uint64_t>()};
        if (seg.param >= m.params.size() || seg.begin < 0 || seg.end < seg.begin) {
          throw EngineryError("segment out of range in file entry '" + info.name + "'", where);
        }
        info.segments.push_back(std::move(seg));
      }
      m.files.push_back(std::move(info));
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw EngineryError("malformed checkpoint metadata at field '" + field + "': " + e.what(), where);
  }
}

Metadata read_metadata(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kMetadataFile).string();
  std::ifstream in(path);
  if (!in) {
    throw EngineryError("no " + std::string(kMetadataFile) + ": not a complete checkpoint directory", path,
                        "a directory written by save_checkpoint");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw EngineryError(std::string("cannot parse checkpoint metadata: ") + e.what(), path);
  }
  return metadata_from_json(j, path);
}

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
