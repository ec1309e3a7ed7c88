#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "host_api/error.h"

namespace enginery {
namespace models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// I64 is for data files (token ids and masks, e.g. bench/gpu/make_rl_batch.py), not for model weights.
const char* kAllowedDtypes = "F32, BF16, F16, I64";

c10::ScalarType dtype_from_name(const std::string& name, const std::string& where) {
  if (name == "F32") return c10::kFloat;
  if (name == "BF16") return c10::kBFloat16;
  if (name == "F16") return c10::kHalf;
  if (name == "I64") return c10::kLong;
  throw EngineryError("unsupported tensor dtype '" + name + "'", where, kAllowedDtypes);
}

std::string dtype_name(c10::ScalarType dtype, const std::string& where) {
  switch (dtype) {
    case c10::kFloat: return "F32";
    case c10::kBFloat16: return "BF16";
    case c10::kHalf: return "F16";
    case c10::kLong: return "I64";
    default: throw EngineryError(std::string("cannot write dtype ") + c10::toString(dtype), where, kAllowedDtypes);
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw EngineryError(std::string("cannot open: ") + std::strerror(errno), path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw EngineryError(std::string("cannot stat: ") + std::strerror(errno), path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    throw EngineryError("not a safetensors file (shorter than its 8-byte header size)", path);
  }
  void* base = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw EngineryError(std::string("cannot map: ") + std::strerror(errno), path);
  const size_t size = size_;
  mapping_ = std::shared_ptr<void>(base, [size](void* p) { ::munmap(p, size); });
  const auto* bytes = static_cast<const uint8_t*>(base);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);  // little-endian u64, as are all supported hosts
  if (header_len > size_ - 8) throw EngineryError("header length exceeds the file size", path);
  data_ = bytes + 8 + header_len;
  const uint64_t data_size = size_ - 8 - header_len;
  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + header_len);
  } catch (const json::exception& e) {
    throw EngineryError(std::string("header is not valid JSON: ") + e.what(), path);
  }
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string where = path + ": " + it.key();
    Entry e;
    e.dtype = dtype_from_name(it->at("dtype").get<std::string>(), where);
    e.shape = it->at("shape").get<std::vector<int64_t>>();
    const auto offsets = it->at("data_offsets").get<std::vector<uint64_t>>();
    if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size) {
      throw EngineryError("data_offsets out of range", where);
    }
    e.begin = offsets[0];
    e.end = offsets[1];
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    if (static_cast<uint64_t>(numel) * c10::elementSize(e.dtype) != e.end - e.begin) {
      throw EngineryError("byte size does not match dtype and shape", where);
    }
    entries_.emplace(it.key(), std::move(e));
  }
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
  const Entry& e = it->second;
  auto keep = mapping_;
  // from_blob wants a non-const pointer; the pages are mapped read-only, so writers must clone first.
  void* ptr = const_cast<uint8_t*>(data_ + e.begin);
  if (e.begin == e.end) return torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  return torch::from_blob(ptr, e.shape, [keep](void*) {}, torch::TensorOptions().dtype(e.dtype));
}

NamedTensors read_safetensors_dir(const std::string& dir) {
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single_path = fs::path(dir) / "model.safetensors";
  NamedTensors out;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception& e) {
      throw EngineryError(std::string("not valid JSON: ") + e.what(), index_path.string());
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw EngineryError("missing field 'weight_map'", index_path.string() + ": weight_map");
    }
    std::map<std::string, std::vector<std::string>> by_file;
    std::vector<std::string> files;  // first-seen order
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      const std::string file = it->get<std::string>();
      if (!by_file.count(file)) files.push_back(file);
      by_file[file].push_back(it.key());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      SafetensorsFile shard((fs::path(dir) / file).string());
      std::set<std::string> wanted(by_file[file].begin(), by_file[file].end());
      for (const auto& name : shard.names()) {
        if (wanted.erase(name)) out.emplace_back(name, shard.tensor(name));
      }
      if (!wanted.empty()) {
        throw EngineryError("index names tensor '" + *wanted.begin() + "' but the shard lacks it", shard.path());
      }
    }
    return out;
  }
  if (!fs::exists(single_path)) {
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
