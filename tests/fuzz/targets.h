#pragma once
// The fuzz targets of enginery_fuzz, one per parser of untrusted input (the run config, plugin manifests,
// safetensors headers, checkpoint metadata, .jsonl training data). A target's fuzz_one feeds one input to the real public entry point;
// docs/ARCHITECTURE.md, "Errors": bad input must end in EngineryError, so any other exception escaping it, a
// broken invariant (thrown as Finding) or a crash is a finding.
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/fuzz/mutator.h"

namespace enginery {
namespace fuzz {

// A broken invariant that a target checks after a successful parse.
class Finding : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

struct Target {
  std::string name;
  Syntax syntax = Syntax::kToml;
  std::function<void(const std::string& input)> fuzz_one;
  std::function<std::vector<std::string>()> seeds;  // besides the files of tests/fuzz/corpus/<name>/
  std::vector<std::string> dictionary;               // tokens worth inserting: key names of the format
  // Optional: restores framing that mutations break (safetensors' length prefix) on some of the inputs.
  std::function<void(std::string& input, Mutator& mutator)> repair;
};

const std::vector<Target>& all_targets();

Target config_target();
Target config_overrides_target();
Target manifest_target();
Target safetensors_target();
Target checkpoint_target();
Target data_jsonl_target();

// A directory of this process only (targets that parse files write their input there), removed at exit.
const std::filesystem::path& scratch_dir();
void write_file(const std::filesystem::path& path, const std::string& bytes);
std::string read_file(const std::filesystem::path& path);
// The source tree (for seeds such as examples/demo.toml).
std::filesystem::path source_dir();

}  // namespace fuzz
}  // namespace enginery
