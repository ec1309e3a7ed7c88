#include "support/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "host_api/error.h"

namespace enginery {
namespace {

[[noreturn]] void libcrypto_failed(const char* step) {
  throw EngineryError(std::string("OpenSSL ") + step + " failed", "sha256");
}

// Closes the descriptor on every path out of sha256_file_hex.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (!context_) libcrypto_failed("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(context_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context_);
    libcrypto_failed("EVP_DigestInit_ex(sha256)");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(context_); }

void Sha256::update(const void* data, size_t size) {
  if (size > 0 && EVP_DigestUpdate(context_, data, size) != 1) libcrypto_failed("EVP_DigestUpdate");
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context_, digest, &length) != 1 || length != 32) libcrypto_failed("EVP_DigestFinal_ex");
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += kDigits[digest[i] >> 4];
    out += kDigits[digest[i] & 0xf];
  }
  return out;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 sha;
  sha.update(bytes.data(), bytes.size());
  return sha.hex();
}

std::string sha256_file_hex(const std::filesystem::path& file) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  Descriptor in{::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (in.fd < 0) {
    throw EngineryError(std::string("cannot open file to compute its sha256: ") + std::strerror(errno), file.string());
  }
  struct stat st {};
  if (::fstat(in.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    throw EngineryError("not a regular file, so no sha256 is computed", file.string(), "a regular file");
  }
  Sha256 sha;
  std::vector<char> buffer(1 << 20);
  for (;;) {
    ssize_t got = ::read(in.fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      throw EngineryError(std::string("read error while computing sha256: ") + std::strerror(errno), file.string());
    }
    if (got == 0) break;
    sha.update(buffer.data(), static_cast<size_t>(got));
  }
  return sha.hex();
}

}  // namespace enginery
