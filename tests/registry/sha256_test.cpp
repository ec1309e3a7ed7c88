#include <sys/stat.h>

#include <algorithm>

#include <gtest/gtest.h>

#include "support/sha256.h"
#include "tests/registry/plugin_test_util.h"

namespace enginery::test {
namespace {

// Test vectors of FIPS 180-4 / NIST CSRC examples.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileMatchesInMemoryAcrossBlockBoundaries) {
  TempDir tmp;
  std::string data;
  for (int i = 0; i < 200000; ++i) data.push_back(static_cast<char>(i * 7 + 3));
  write_file(tmp.path() / "blob", data);
  EXPECT_EQ(sha256_file_hex(tmp.path() / "blob"), sha256_hex(data));
  EXPECT_THROW(sha256_file_hex(tmp.path() / "absent"), std::exception);
}

// Incremental updates of any sizes give the one-shot digest (libcrypto streams; the checkpoint writer relies on it).
TEST(Sha256, IncrementalEqualsOneShot) {
  std::string data(100003, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  Sha256 sha;
  size_t at = 0;
  for (size_t step : {0u, 1u, 63u, 64u, 65u, 4096u, 99999u}) {
    size_t take = std::min(step, data.size() - at);
    sha.update(data.data() + at, take);
    at += take;
  }
  sha.update(data.data() + at, data.size() - at);
  EXPECT_EQ(sha.hex(), sha256_hex(data));
}

// A FIFO would block a reader forever: refused at once, with its path.
TEST(Sha256, FifoIsRefusedWithoutBlocking) {
  TempDir tmp;
  const fs::path fifo = tmp.path() / "fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  try {
    sha256_file_hex(fifo);
    ADD_FAILURE() << "a FIFO was hashed";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(fifo.string() + ": not a regular file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace enginery::test
