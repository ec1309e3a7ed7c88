#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <set>
#include <tuple>

#include "host_api/error.h"
#include "support/input_files.h"

namespace enginery {
namespace models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// I64 is for data files (token ids and masks, e.g. bench/gpu/make_rl_batch.py), not for model weights.
const char* kSafetensorsDtypes = "F32, BF16, F16, I64";

c10::ScalarType dtype_from_name(const std::string& name, const std::string& where) {
  if (name == "F32") return c10::kFloat;
  if (name == "BF16") return c10::kBFloat16;
  if (name == "F16") return c10::kHalf;
  if (name == "I64") return c10::kLong;
  throw EngineryError("unsupported tensor dtype '" + name + "'", where, kSafetensorsDtypes);
}

std::string dtype_name(c10::ScalarType dtype, const std::string& where) {
  switch (dtype) {
    case c10::kFloat: return "F32";
    case c10::kBFloat16: return "BF16";
    case c10::kHalf: return "F16";
    case c10::kLong: return "I64";
    default: throw EngineryError(std::string("cannot write dtype ") + c10::toString(dtype), where, kSafetensorsDtypes);
  }
}

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr size_t kMaxDims = 64;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

const json& entry_field(const json& entry, const char* key, const std::string& where) {
  const auto it = entry.find(key);
  if (it == entry.end()) throw EngineryError(std::string("missing field '") + key + "'", where);
  return *it;
}

// The element count of a header's "shape", each dimension a non-negative integer and numel * itemsize an int64.
int64_t checked_numel(const json& shape, size_t itemsize, std::vector<int64_t>& dims, const std::string& where) {
  if (!shape.is_array() || shape.size() > kMaxDims) {
    throw EngineryError("field 'shape' must be an array of at most " + std::to_string(kMaxDims) + " dimensions", where);
  }
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& d = shape[i];
    const bool fits = d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(kInt64Max);
    if (!fits) {
      const std::string value = d.is_number_integer() ? std::to_string(d.get<int64_t>()) : "not an integer";
      throw EngineryError("dimension " + std::to_string(i) + " of 'shape' is " + value, where,
                          "non-negative integers");
    }
    dims.push_back(d.get<int64_t>());
    empty = empty || dims.back() == 0;
  }
  if (empty) return 0;  // no overflow can come from a product that is 0
  const int64_t max_numel = kInt64Max / static_cast<int64_t>(itemsize);
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (numel > max_numel / d) throw EngineryError("'shape' has more elements than int64 can count in bytes", where);
    numel *= d;
  }
  return numel;
}

SafetensorsEntry read_entry(const json& entry, uint64_t data_size, const std::string& where) {
  if (!entry.is_object()) throw EngineryError("tensor entry must be a JSON object", where);
  SafetensorsEntry e;
  const json& dtype = entry_field(entry, "dtype", where);
  if (!dtype.is_string()) throw EngineryError("field 'dtype' must be a string", where, kSafetensorsDtypes);
  e.dtype = dtype_from_name(dtype.get<std::string>(), where);
  const size_t itemsize = c10::elementSize(e.dtype);
  const int64_t numel = checked_numel(entry_field(entry, "shape", where), itemsize, e.shape, where);
  const json& offsets = entry_field(entry, "data_offsets", where);
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    throw EngineryError("field 'data_offsets' must be [begin, end], two non-negative integers", where);
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_size) {
    throw EngineryError("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                            "] outside the data section of " + std::to_string(data_size) + " bytes",
                        where, "0 <= begin <= end <= the data section's size");
  }
  if (static_cast<uint64_t>(numel) * itemsize != e.end - e.begin) {
    throw EngineryError("data_offsets span " + std::to_string(e.end - e.begin) + " bytes but dtype and shape give " +
                            std::to_string(numel) + " x " + std::to_string(itemsize),
                        where);
  }
  return e;
}

// Two tensors sharing a byte would alias one another.
void check_no_overlap(const std::map<std::string, SafetensorsEntry>& entries, const std::string& path) {
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;
  for (const auto& [name, e] : entries) {
    if (e.begin < e.end) spans.emplace_back(e.begin, e.end, &name);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    const auto& [begin, end, name] = spans[i];
    const auto& [prev_begin, prev_end, prev_name] = spans[i - 1];
    if (begin < prev_end) {
      throw EngineryError("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                              ") overlap those of '" + *prev_name + "' [" + std::to_string(prev_begin) + ", " +
                              std::to_string(prev_end) + ")",
                          path + ": " + *name, "tensors whose bytes do not overlap");
    }
  }
}

SafetensorsHeader parse_header_json(const uint8_t* bytes, size_t size, const std::string& path) {
  if (size < 8) throw EngineryError("not a safetensors file (shorter than its 8-byte header size)", path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);  // little-endian u64, as are all supported hosts
  if (header_len > size - 8 || header_len > kMaxHeaderBytes) {
    throw EngineryError("header length " + std::to_string(header_len) + " exceeds the file's " +
                            std::to_string(size) + " bytes or the limit",
                        path, "at most " + std::to_string(kMaxHeaderBytes) + " bytes, inside the file");
  }
  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  const uint64_t data_size = size - out.data_start;
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const json::exception& e) {
    throw EngineryError(std::string("header is not valid JSON: ") + e.what(), path);
  }
  if (!header.is_object()) {
    throw EngineryError(std::string("header must be a JSON object, not ") + header.type_name(), path);
  }
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw EngineryError("__metadata__ must be a JSON object", path + ": __metadata__");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (m->is_string()) out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    out.entries.emplace(it.key(), read_entry(*it, data_size, path + ": " + it.key()));
  }
  check_no_overlap(out.entries, path);
  return out;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const void* bytes, size_t size, const std::string& path) {
  try {
    return parse_header_json(static_cast<const uint8_t*>(bytes), size, path);
  } catch (const json::exception& e) {  // the checks leave none; a last line against a crash
    throw EngineryError(std::string("malformed safetensors header: ") + e.what(), path);
  } catch (const std::bad_alloc&) {
    throw EngineryError("not enough memory to read the safetensors header", path);
  }
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = input::open_regular(path, "cannot open safetensors file");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw EngineryError(std::string("cannot stat: ") + std::strerror(err), path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw EngineryError("not a safetensors file (shorter than its 8-byte header size)", path);
  }
  void* base = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (base == MAP_FAILED) throw EngineryError(std::string("cannot map: ") + std::strerror(map_err), path);
  const size_t size = size_;
  mapping_ = std::shared_ptr<void>(base, [size](void* p) { ::munmap(p, size); });
  SafetensorsHeader header = parse_safetensors_header(base, size_, path);
  data_ = static_cast<const uint8_t*>(base) + header.data_start;
  entries_ = std::move(header.entries);
  metadata_ = std::move(header.metadata);
}

SafetensorsFile::~SafetensorsFile() = default;

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, e] : entries_) order.emplace_back(e.begin, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (auto& [offset, name] : order) out.push_back(std::move(name));
  return out;
}

torch::Tensor SafetensorsFile::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw EngineryError("no tensor '" + name + "'", path_);
  const SafetensorsEntry& e = it->second;
  auto keep = mapping_;
  // from_blob wants a non-const pointer; the pages are mapped read-only, so writers must clone first.
  void* ptr = const_cast<uint8_t*>(data_ + e.begin);
  const auto options = torch::TensorOptions().dtype(e.dtype);
  if (e.begin == e.end) return torch::empty(e.shape, options);
  // A writer that did not pad its header leaves tensors off their element alignment, which vectorised kernels may
  // not read: such a tensor is copied out once instead of viewed.
  if (reinterpret_cast<uintptr_t>(ptr) % c10::elementSize(e.dtype) != 0) {
    auto copy = torch::empty(e.shape, options);
    std::memcpy(copy.data_ptr(), ptr, e.end - e.begin);
    return copy;
  }
  return torch::from_blob(ptr, e.shape, [keep](void*) {}, options);
}

namespace {

constexpr uint64_t kMaxIndexBytes = uint64_t{256} << 20;

// model.safetensors.index.json's weight_map grouped by shard: shard file name -> tensor names. Each name stays inside
// the model directory.
std::map<std::string, std::vector<std::string>> read_index(const std::string& index_path) {
  json index;
  try {
    index = json::parse(input::read_regular(index_path, kMaxIndexBytes, "cannot read the safetensors index"));
  } catch (const json::exception& e) {
    throw EngineryError(std::string("not valid JSON: ") + e.what(), index_path);
  }
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object()) {
    throw EngineryError("missing field 'weight_map' (an object)", index_path + ": weight_map");
  }
  std::map<std::string, std::vector<std::string>> by_file;
  const json& weight_map = index.at("weight_map");
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    const std::string where = index_path + ": weight_map." + it.key();
    if (!it->is_string()) throw EngineryError("the shard of a tensor must be a file name (a string)", where);
    const std::string file = it->get<std::string>();
    input::check_name_inside_dir(file, where);
    by_file[file].push_back(it.key());
  }
  return by_file;
}

bool exists_quietly(const fs::path& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

}  // namespace

NamedTensors read_safetensors_dir(const std::string& dir) {
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  NamedTensors out;
  if (exists_quietly(index_path)) {
    // Shards in name order (std::map), tensors in file order within each.
    for (const auto& [file, names] : read_index(index_path.string())) {
      SafetensorsFile shard((fs::path(dir) / file).string());
      std::set<std::string> wanted(names.begin(), names.end());
      for (const auto& name : shard.names()) {
        if (wanted.erase(name)) out.emplace_back(name, shard.tensor(name));
      }
      if (!wanted.empty()) {
        throw EngineryError("index names tensor '" + *wanted.begin() + "' but the shard lacks it", shard.path());
      }
    }
    return out;
  }
  if (!exists_quietly(single_path)) {
    throw EngineryError("no model.safetensors or model.safetensors.index.json", dir);
  }
  SafetensorsFile file(single_path.string());
  for (const auto& name : file.names()) out.emplace_back(name, file.tensor(name));
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Header keys are written in sorted order (nlohmann's object) and data in the given order.
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> blobs;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const uint64_t nbytes = static_cast<uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", dtype_name(c.scalar_type(), path + ": " + name)},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    blobs.push_back(c);
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');  // align the data to 8 bytes as the reference writer does
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw EngineryError("cannot write", tmp);
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& c : blobs) {
      out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
    }
    if (!out) throw EngineryError("write failed", tmp);
  }
  fs::rename(tmp, path);  // never leave a half-written checkpoint under the final name
}

void write_safetensors_dir(const std::string& dir, const NamedTensors& tensors, int64_t max_shard_bytes) {
  fs::create_directories(dir);
  // Remove weight files of an earlier save so the directory describes exactly this one.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "model.safetensors.index.json" ||
        (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0)) {
      fs::remove(entry.path());
    }
  }
  std::vector<NamedTensors> shards(1);
  int64_t current = 0, total = 0;
  for (const auto& nt : tensors) {
    const int64_t nbytes = nt.second.numel() * nt.second.element_size();
    if (max_shard_bytes > 0 && current > 0 && current + nbytes > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(nt);
    current += nbytes;
    total += nbytes;
  }
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors);
    return;
  }
  json weight_map = json::object();
  const size_t n = shards.size();
  for (size_t i = 0; i < n; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, n);
    write_safetensors((fs::path(dir) / name).string(), shards[i]);
    for (const auto& nt : shards[i]) weight_map[nt.first] = name;
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream out(fs::path(dir) / "model.safetensors.index.json");
  out << index.dump(2) << "\n";
}

}  // namespace models
}  // namespace enginery
