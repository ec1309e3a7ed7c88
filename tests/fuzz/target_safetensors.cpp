// Target of the safetensors header (models/safetensors.cpp): an input is a whole file, 8-byte little-endian
// header length, JSON header, data. Every tensor the file hands out must lie inside the file.
#include <cstring>
#include <memory>

#include "host_api/error.h"
#include "models/safetensors.h"
#include "tests/fuzz/targets.h"

namespace enginery {
namespace fuzz {
namespace {

// The entry point under test: SafetensorsFile maps a path, so the input goes through a file.
std::unique_ptr<models::SafetensorsFile> open_safetensors(const std::string& bytes) {
  const std::filesystem::path path = scratch_dir() / "fuzzed.safetensors";
  write_file(path, bytes);
  return std::make_unique<models::SafetensorsFile>(path.string());
}

// A file as write_safetensors lays it out: the header padded with spaces so the data starts 8-byte aligned.
std::string with_length_prefix(std::string header, size_t data_bytes) {
  while (header.size() % 8 != 0) header.push_back(' ');
  const uint64_t length = header.size();
  std::string out(8, '\0');
  std::memcpy(&out[0], &length, 8);  // little-endian hosts only, as the reader
  return out + header + std::string(data_bytes, '\x01');
}

// Mutations of the header change its length; most inputs get the prefix fixed again, the header taken to end at
// its last '}' and the spaces after it, so they reach the JSON checks instead of stopping at the length check.
void fix_length_prefix(std::string& input, Mutator& mutator) {
  if (input.size() < 8 || mutator.below(4) == 0) return;
  const size_t close = input.rfind('}');
  if (close == std::string::npos || close < 8) return;
  size_t end = close + 1;
  while (end < input.size() && input[end] == ' ') ++end;
  const uint64_t length = end - 8;
  std::memcpy(&input[0], &length, 8);
}

}  // namespace

namespace safetensors {
void fuzz_one(const std::string& input) {
  const auto file = open_safetensors(input);
  for (const std::string& name : file->names()) {
    const torch::Tensor t = file->tensor(name);
    // A view of more bytes than the file holds reads outside the mapping.
    if (t.numel() > 0 && static_cast<uint64_t>(t.numel()) > input.size() / t.element_size()) {
      throw Finding("tensor '" + name + "' views " + std::to_string(t.numel()) + " elements of " +
                    std::to_string(t.element_size()) + " bytes in a file of " + std::to_string(input.size()) +
                    " bytes");
    }
  }
}
}  // namespace safetensors

Target safetensors_target() {
  Target t;
  t.name = "safetensors";
  t.syntax = Syntax::kJson;
  t.fuzz_one = safetensors::fuzz_one;
  t.seeds = [] {
    return std::vector<std::string>{
        with_length_prefix(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 16),
        with_length_prefix(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},)"
                           R"("b":{"dtype":"F16","shape":[1,2],"data_offsets":[6,10]}})", 10),
        with_length_prefix(R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                           R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})", 4),
        with_length_prefix(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4)};
  };
  t.dictionary = {"\"dtype\":", "\"shape\":", "\"data_offsets\":", "\"__metadata__\":", "\"F32\"", "\"BF16\"",
                  "\"F16\"", "\"I64\""};
  t.repair = fix_length_prefix;
  return t;
}

}  // namespace fuzz
}  // namespace enginery
