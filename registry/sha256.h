#pragma once
// SHA-256 of a file, as lowercase hex, for the optional `sha256` field of a plugin manifest. Own implementation
// (FIPS 180-4) so the registry needs no crypto library on either machine.
#include <filesystem>
#include <string>

namespace enginery {

std::string sha256_hex(const std::string& bytes);
// Throws EngineryError naming the file when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& file);

}  // namespace enginery
