#pragma once
// What the suite runs against (one engine registration found in the manifests) and what it runs (the checks).
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "host_api/plugin_api.h"
#include "registry/engine_registry.h"

namespace enginery {
namespace conformance {

// Capability vocabulary (conformance/README.md): "precision-<device>-<fp32|bf16|fp16>",
// "checkpoint-same-world", "multi-rank", "grad-scaler".
struct Target {
  EngineKey key;
  EngineOrigin origin;
  std::set<std::string> capabilities;
  const EngineRegistry* registry = nullptr;
  std::filesystem::path plugin_dir;
  std::string model_path;
  std::vector<std::string> self_command;  // how to start this program again as a rank worker

  bool has(const std::string& capability) const { return capabilities.count(capability) != 0; }
  bool value_model() const { return key.model_type == "value_model"; }
  std::string suite_name() const { return key.backend + "/" + key.model_type + "/" + key.device; }
  // "precision-<device>-<dtype>" for dtype "fp32" | "bf16" | "fp16".
  std::string precision_capability(const std::string& dtype) const {
    return "precision-" + key.device + "-" + dtype;
  }
};

struct Check {
  std::string name;
  std::string what;  // one line: the behaviour it proves
  // Empty: run the check; otherwise why it is skipped (a missing capability, a missing device).
  std::function<std::string(const Target&)> skip_reason;
  std::function<void(const Target&)> body;  // GoogleTest assertions
};

// "" when the target declares every capability, else "its registration does not declare '<cap>'" (the first).
std::string missing_capability(const Target& target, const std::vector<std::string>& capabilities);
// Precision capabilities by dtype name, e.g. requires({"fp32"}) -> precision-<device>-fp32.
std::function<std::string(const Target&)> requires_precisions(std::vector<std::string> dtypes,
                                                              std::vector<std::string> other = {});

// The checks, in run order; each checks_*.cpp adds its own.
void add_precision_checks(std::vector<Check>& checks);
void add_training_checks(std::vector<Check>& checks);
void add_state_checks(std::vector<Check>& checks);
void add_export_checks(std::vector<Check>& checks);
void add_multirank_checks(std::vector<Check>& checks);
void add_loop_checks(std::vector<Check>& checks);
const std::vector<Check>& all_checks();

}  // namespace conformance
}  // namespace enginery
