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

}  // namespace
}  // namespace enginery::test
