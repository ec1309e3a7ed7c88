#include "plugin/fsdp/checkpoint_format.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <new>
#include <set>

#include "host_api/error.h"
#include "support/input_files.h"
#include "support/list_text.h"

namespace enginery {
namespace fsdp {
namespace ckpt {
namespace {

using nlohmann::json;

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxWorldSize = int64_t{1} << 24;
constexpr int64_t kMaxStep = int64_t{1} << 53;  // steps are counted up and turned into doubles: keep both exact
constexpr int64_t kMaxNumel = kInt64Max / static_cast<int64_t>(sizeof(float));  // its float32 bytes fit an int64
constexpr size_t kMaxDims = 64;
// Copying a JSON value recurses once per nesting level: a hostile metadata.json nested a million deep would
// overflow the stack. The format nests 4 levels.
constexpr int kMaxDepth = 64;
constexpr uint64_t kMaxMetadataBytes = uint64_t{256} << 20;

std::string range(int64_t lo, int64_t hi) {
  return "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

// Typed access to metadata.json in which every value is checked before it is returned; errors name the file and
// the field ("files[2].segments[7].offset").
class Fields {
 public:
  explicit Fields(const std::string& where) : where_(where) {}
  const std::string& where() const { return where_; }

  static std::string join(const std::string& parent, const std::string& key) {
    if (key.empty()) return parent;
    return parent.empty() ? key : parent + "." + key;
  }
  [[noreturn]] void fail(const std::string& field, const std::string& what, const std::string& allowed = {}) const {
    throw EngineryError("field '" + field + "' " + what, where_ + ": " + field, allowed);
  }

  const json& member(const json& obj, const std::string& parent, const char* key) const {
    if (!obj.is_object()) fail(parent.empty() ? "(top level)" : parent, "must be a JSON object");
    const auto it = obj.find(key);
    if (it == obj.end()) fail(join(parent, key), "is missing");
    return *it;
  }
  int64_t as_integer(const json& v, const std::string& parent, const char* key, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail(join(parent, key), "must be an integer", range(lo, hi));
    if (v.is_number_unsigned()) {  // nlohmann keeps non-negative integers unsigned, up to 2^64 - 1
      const uint64_t u = v.get<uint64_t>();
      if (hi < 0 || u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) {
        fail(join(parent, key), "is " + std::to_string(u) + ", out of range", range(lo, hi));
      }
      return static_cast<int64_t>(u);
    }
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(join(parent, key), "is " + std::to_string(x) + ", out of range", range(lo, hi));
    return x;
  }
  int64_t integer(const json& obj, const std::string& parent, const char* key, int64_t lo, int64_t hi) const {
    return as_integer(member(obj, parent, key), parent, key, lo, hi);
  }
  std::string string(const json& v, const std::string& parent, const char* key) const {
    if (!v.is_string()) fail(join(parent, key), "must be a string");
    return v.get<std::string>();
  }
  std::string one_of(const json& v, const std::string& parent, const char* key,
                     const std::vector<std::string>& allowed) const {
    std::string s = string(v, parent, key);
    if (std::find(allowed.begin(), allowed.end(), s) != allowed.end()) return s;
    fail(join(parent, key), "is '" + s + "'", join_list(allowed));
  }
  const json& array(const json& obj, const std::string& parent, const char* key) const {
    const json& v = member(obj, parent, key);
    if (!v.is_array()) fail(join(parent, key), "must be a JSON array");
    return v;
  }

 private:
  const std::string where_;  // a copy: a Fields may be built from a temporary
};

void read_header(const Fields& f, const json& j, Metadata& m) {
  const std::string format = f.string(f.member(j, "", "format"), "", "format");
  if (format != kFormatName) {
    throw EngineryError("not an enginery FSDP checkpoint (format '" + format + "')", f.where(), kFormatName);
  }
  m.version = f.integer(j, "", "version", kInt64Min, kInt64Max);
  if (m.version != kFormatVersion) {
    throw EngineryError("checkpoint format version " + std::to_string(m.version) + " is not readable here",
                        f.where(), std::to_string(kFormatVersion));
  }
  m.global_step = f.integer(j, "", "global_step", 0, kMaxStep);
  m.world_size = f.integer(j, "", "world_size", 1, kMaxWorldSize);
  m.fsdp_size = f.integer(j, "", "fsdp_size", 1, m.world_size);
  if (m.world_size % m.fsdp_size != 0) {
    f.fail("fsdp_size", std::to_string(m.fsdp_size) + " does not divide world_size " + std::to_string(m.world_size),
           "a divisor of world_size");
  }
  m.strategy = f.one_of(f.member(j, "", "strategy"), "", "strategy", {"fsdp", "fsdp2"});
  const json& contents = f.array(j, "", "contents");
  for (size_t i = 0; i < contents.size(); ++i) {
    m.contents.push_back(
        f.one_of(contents[i], "contents[" + std::to_string(i) + "]", "", all_contents()));
  }
}

// The parameter table; returns each parameter's element count.
std::vector<int64_t> read_params(const Fields& f, const json& j, Metadata& m) {
  std::vector<int64_t> numels;
  std::set<std::string> names;
  const json& params = f.array(j, "", "params");
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string at = "params[" + std::to_string(i) + "]";
    ParamInfo p;
    p.name = f.string(f.member(params[i], at, "name"), at, "name");
    if (p.name.empty() || !names.insert(p.name).second) f.fail(Fields::join(at, "name"), "is empty or repeated");
    const json& shape = f.array(params[i], at, "shape");
    if (shape.size() > kMaxDims) {
      f.fail(Fields::join(at, "shape"), "has " + std::to_string(shape.size()) + " dimensions",
             "at most " + std::to_string(kMaxDims));
    }
    int64_t numel = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t size = f.as_integer(shape[d], Fields::join(at, "shape"), std::to_string(d).c_str(), 0, kMaxNumel);
      if (size != 0 && numel > kMaxNumel / size) {
        f.fail(Fields::join(at, "shape"), "has more elements than a checkpoint can store",
               "at most " + std::to_string(kMaxNumel) + " elements");
      }
      numel *= size;
      p.shape.push_back(size);
    }
    p.dtype = f.one_of(f.member(params[i], at, "dtype"), at, "dtype", {"float32"});
    numels.push_back(numel);
    m.params.push_back(std::move(p));
  }
  return numels;
}

// One segment row [param, state, begin, end, offset] of file `file`, inside its parameter and inside the file.
Segment read_segment(const Fields& f, const json& row, const std::string& at, const FileInfo& file,
                     const std::vector<int64_t>& numels) {
  if (!row.is_array() || row.size() != 5) f.fail(at, "must be [param, state, begin, end, offset]");
  Segment s;
  s.param = static_cast<size_t>(f.as_integer(row[0], at, "param", 0, static_cast<int64_t>(numels.size()) - 1));
  const std::vector<std::string> states = file.content == kContentModel
                                               ? std::vector<std::string>{kStateParam}
                                               : std::vector<std::string>{kStateExpAvg, kStateExpAvgSq};
  s.state = f.one_of(row[1], at, "state", states);
  s.begin = f.as_integer(row[2], at, "begin", 0, numels[s.param]);
  s.end = f.as_integer(row[3], at, "end", s.begin, numels[s.param]);
  s.offset = static_cast<uint64_t>(f.as_integer(row[4], at, "offset", 0, static_cast<int64_t>(file.bytes)));
  if (s.offset % sizeof(float) != 0) f.fail(Fields::join(at, "offset"), "is not a multiple of 4");
  // Both sides stay below 2^63: no wrap-around can pass this bound.
  const uint64_t count = static_cast<uint64_t>(s.end - s.begin);
  if (count > (file.bytes - s.offset) / sizeof(float)) {
    f.fail(at, "names bytes [" + std::to_string(s.offset) + ", " + std::to_string(s.offset + count * sizeof(float)) +
                   ") past the end of " + file.name + " (" + std::to_string(file.bytes) + " bytes)");
  }
  return s;
}

void read_files(const Fields& f, const json& j, const std::vector<int64_t>& numels, Metadata& m) {
  std::set<std::string> names;
  const json& files = f.array(j, "", "files");
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string at = "files[" + std::to_string(k) + "]";
    const json& entry = files[k];
    FileInfo info;
    info.name = f.string(f.member(entry, at, "name"), at, "name");
    input::check_name_inside_dir(info.name, f.where() + ": " + Fields::join(at, "name"));
    if (!names.insert(info.name).second) f.fail(Fields::join(at, "name"), "repeats '" + info.name + "'");
    info.content = f.one_of(f.member(entry, at, "content"), at, "content", file_contents());
    info.rank = f.integer(entry, at, "rank", 0, m.world_size - 1);
    info.bytes = static_cast<uint64_t>(f.integer(entry, at, "bytes", 0, kInt64Max));
    info.sha256 = f.string(f.member(entry, at, "sha256"), at, "sha256");
    if (info.sha256.size() != 64 || info.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
      f.fail(Fields::join(at, "sha256"), "is not a sha256", "64 lowercase hex digits");
    }
    const json& segments = f.array(entry, at, "segments");
    if (info.content == kContentExtra && !segments.empty()) {
      f.fail(Fields::join(at, "segments"), "must be empty in an extra file");
    }
    for (size_t i = 0; i < segments.size(); ++i) {
      info.segments.push_back(
          read_segment(f, segments[i], Fields::join(at, "segments[" + std::to_string(i) + "]"), info, numels));
    }
    m.files.push_back(std::move(info));
  }
}

// Every element of every parameter stored exactly once per state that `contents` promises.
void check_coverage(const Fields& f, const Metadata& m, const std::vector<int64_t>& numels) {
  std::vector<std::string> states;
  if (m.has(kContentModel)) states.push_back(kStateParam);
  if (m.has(kContentOptimizer)) states.insert(states.end(), {kStateExpAvg, kStateExpAvgSq});
  std::map<std::pair<size_t, std::string>, std::vector<std::pair<int64_t, int64_t>>> stored;
  for (const auto& file : m.files) {
    for (const auto& s : file.segments) stored[{s.param, s.state}].emplace_back(s.begin, s.end);
  }
  for (const auto& state : states) {
    for (size_t p = 0; p < m.params.size(); ++p) {
      const auto fault = tiling_fault(stored[{p, state}], 0, numels[p]);
      if (!fault) continue;
      throw EngineryError("element " + std::to_string(fault->element) + " of '" + m.params[p].name + "' (" + state +
                              ") is " + (fault->twice ? "stored twice" : "stored in no file"),
                          f.where() + ": files", "segments that store every element of every parameter once");
    }
  }
}

// state: what the engine restores besides the tensors.
void check_state(const Fields& f, const json& state) {
  f.integer(f.member(state, "state", "optimizer"), "state.optimizer", "step", 0, kMaxStep);
  f.integer(f.member(state, "state", "lr_scheduler"), "state.lr_scheduler", "step", 0, kMaxStep);
  if (!state.contains("grad_scaler")) return;
  const json& scaler = state.at("grad_scaler");
  const json& scale = f.member(scaler, "state.grad_scaler", "scale");
  const double max_scale = std::numeric_limits<float>::max();
  if (!scale.is_number() || !(scale.get<double>() > 0.0) || !(scale.get<double>() <= max_scale)) {
    f.fail("state.grad_scaler.scale", "must be a positive finite float32", "(0, " + std::to_string(max_scale) + "]");
  }
  f.integer(scaler, "state.grad_scaler", "growth_tracker", 0, std::numeric_limits<int32_t>::max());
}

}  // namespace

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

std::optional<TilingFault> tiling_fault(std::vector<std::pair<int64_t, int64_t>> ranges, int64_t lo, int64_t hi) {
  std::sort(ranges.begin(), ranges.end());
  int64_t next = lo;  // the first element not yet covered
  for (const auto& [begin, end] : ranges) {
    if (begin >= end) continue;
    if (begin < next) return TilingFault{begin, true};
    if (begin > next) return TilingFault{next, false};
    next = end;
  }
  if (next < hi) return TilingFault{next, false};
  return std::nullopt;
}

Metadata metadata_from_json(const nlohmann::json& j, const std::string& where) {
  const Fields f(where);
  try {
    Metadata m;
    read_header(f, j, m);
    const std::vector<int64_t> numels = read_params(f, j, m);
    read_files(f, j, numels, m);
    check_coverage(f, m, numels);
    check_state(f, f.member(j, "", "state"));
    m.state = j.at("state");
    m.config = j.value("config", nlohmann::json::object());
    return m;
  } catch (const nlohmann::json::exception& e) {  // the checks above leave none; a last line against a crash
    throw EngineryError(std::string("malformed checkpoint metadata: ") + e.what(), where);
  } catch (const std::bad_alloc&) {
    throw EngineryError("not enough memory to read the checkpoint metadata", where);
  }
}

Metadata parse_metadata(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) {
        throw EngineryError("JSON nested deeper than " + std::to_string(kMaxDepth) + " levels", where);
      }
      return true;
    });
  } catch (const json::exception& e) {
    throw EngineryError(std::string("cannot parse checkpoint metadata: ") + e.what(), where);
  } catch (const std::bad_alloc&) {
    throw EngineryError("not enough memory to parse the checkpoint metadata", where);
  }
  return metadata_from_json(j, where);
}

Metadata read_metadata(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kMetadataFile).string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw EngineryError("no " + std::string(kMetadataFile) + ": not a complete checkpoint directory", path,
                        "a directory written by save_checkpoint");
  }
  return parse_metadata(input::read_regular(path, kMaxMetadataBytes, "cannot read checkpoint metadata"), path);
}

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
