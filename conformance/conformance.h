#pragma once
// The per-plugin conformance suite: one GoogleTest suite every engine plugin runs, parameterised at run
// time by (plugin dir, backend, model_type, device) as discovered from the plugin manifests. Only the host_api
// contract and the registry are used, never a plugin header, so a third party's plugin runs the same checks.
//
// Two front ends share this library: the `enginery conformance` command and the ctest binary
// enginery_conformance_tests. Both call run_suite(); both re-run themselves as rank workers for the multi-rank
// check (argv = self_command + "--rank-worker", see rank_worker.h).
#include <filesystem>
#include <string>
#include <vector>

namespace enginery {
namespace conformance {

struct SuiteOptions {
  std::filesystem::path plugin_dir;             // searched alone: ENGINERY_PLUGIN_PATH is ignored (hermetic runs)
  std::string backend;                          // empty: every backend found
  std::string model_type;                       // empty: every model type
  std::string device;                           // empty: every device the manifests declare
  std::string model_path = "builtin:qwen2-tiny";  // model.path handed to the engines
  std::string check_filter = "*";               // gtest-style glob(s) over check names, ':'-separated
  bool list_only = false;                       // print the checks and their skip reasons, run nothing
  std::vector<std::string> self_command;        // argv prefix that runs this program again (for rank workers)
  std::vector<std::string> gtest_args;          // extra --gtest_* flags (ctest binary only)
};

// Loads the plugins, registers one GoogleTest test per (target, check), runs them and prints one line per check:
// PASS, FAIL (with the failure) or SKIP (reason). Returns 0 only when no check failed and at least one target was
// found. Call once per process (GoogleTest is initialised here).
int run_suite(const SuiteOptions& options);

// The names of every check, in run order (for --help texts).
std::vector<std::string> check_names();

}  // namespace conformance
}  // namespace enginery
