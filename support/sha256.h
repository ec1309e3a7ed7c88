#pragma once
// SHA-256 (FIPS 180-4), own implementation so neither the registry (plugin manifests) nor the checkpoint code
// (per-file checksums) needs a crypto library on either machine. Lives in host_api so plugins can use it without
// depending on the plugin-loading code.
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace enginery {

// Incremental: update() any number of times, then hex() once.
class Sha256 {
 public:
  void update(const void* data, size_t size);
  std::string hex();  // lowercase, 64 digits; finalises the digest

 private:
  void compress();
  std::array<uint32_t, 8> state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  size_t used_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const std::string& bytes);
// Throws EngineryError naming the file when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& file);

}  // namespace enginery
