#pragma once
// SHA-256 of the registry (plugin manifests) and the checkpoint code (per-file checksums), computed by OpenSSL's
// libcrypto through its EVP interface: a maintained, reviewed implementation rather than one of our own. The
// OpenSSL headers stay out of this one so its users need no crypto headers to compile.
#include <cstddef>
#include <filesystem>
#include <string>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace enginery {

// Incremental: update() any number of times, then hex() once. Throws EngineryError when libcrypto fails.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  std::string hex();  // lowercase, 64 digits; finalises the digest

 private:
  evp_md_ctx_st* context_;
};

std::string sha256_hex(const std::string& bytes);
// Streams the file in chunks. Throws EngineryError naming the file when it cannot be read or is not a regular file
// (a FIFO is refused, never waited on).
std::string sha256_file_hex(const std::filesystem::path& file);

}  // namespace enginery
