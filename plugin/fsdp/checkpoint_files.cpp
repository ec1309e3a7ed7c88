#include "plugin/fsdp/checkpoint_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "host_api/error.h"
#include "support/input_files.h"
#include "support/sha256.h"

namespace enginery {
namespace fsdp {
namespace ckpt {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw EngineryError(what + ": " + std::strerror(err), path);
}

}  // namespace

FileWriter::FileWriter(std::string path) : path_(std::move(path)), sha_(std::make_unique<Sha256>()) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create checkpoint file", path_, errno);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t FileWriter::append(const void* data, size_t size) {
  if (fd_ < 0) throw EngineryError("append after finish", path_);
  const uint64_t at = bytes_;
  const auto* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd_, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write checkpoint file (" + std::to_string(bytes_ + done) + " bytes written)", path_,
                     n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  sha_->update(data, size);
  bytes_ += size;
  return at;
}

uint64_t FileWriter::append(const torch::Tensor& t) {
  auto cpu = t.detach().to(torch::kCPU).contiguous();
  return append(cpu.data_ptr(), static_cast<size_t>(cpu.numel()) * cpu.element_size());
}

std::string FileWriter::finish() {
  if (::fsync(fd_) != 0) fail("fsync of checkpoint file failed", path_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close of checkpoint file failed", path_, errno);
  return sha_->hex();
}

MappedFile::MappedFile(std::string path, uint64_t bytes, const std::string& sha256) : path_(std::move(path)) {
  const int fd = input::open_regular(path_, "cannot open checkpoint file named in metadata.json");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat checkpoint file", path_, err);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ != bytes) {
    ::close(fd);
    throw EngineryError("checkpoint file is corrupt: it has " + std::to_string(size_) + " bytes, metadata.json says " +
                            std::to_string(bytes),
                        path_, "the file as save_checkpoint wrote it");
  }
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      const int err = errno;
      data_ = nullptr;
      ::close(fd);
      fail("cannot map checkpoint file", path_, err);
    }
  }
  ::close(fd);
  Sha256 sha;
  if (size_ > 0) sha.update(data_, size_);
  const std::string actual = sha.hex();
  if (actual != sha256) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = nullptr;
    throw EngineryError("checkpoint file is corrupt: its sha256 is " + actual + ", metadata.json says " + sha256, path_,
                        "the file as save_checkpoint wrote it");
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

torch::Tensor MappedFile::floats(uint64_t offset, int64_t count) const {
  // Compared without forming offset + 4 * count, which could wrap around past the bound.
  if (count < 0 || offset > size_ || static_cast<uint64_t>(count) > (size_ - offset) / sizeof(float) ||
      offset % sizeof(float) != 0) {
    throw EngineryError("metadata.json names " + std::to_string(count) + " floats at byte " + std::to_string(offset) +
                            ", outside the file's " + std::to_string(size_) + " bytes",
                        path_);
  }
  if (count == 0) return torch::empty({0}, torch::kFloat);
  return torch::from_blob(static_cast<char*>(data_) + offset, {count}, torch::kFloat);
}

std::string MappedFile::text() const {
  return size_ == 0 ? std::string() : std::string(static_cast<const char*>(data_), size_);
}

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
