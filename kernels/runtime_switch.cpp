#include "kernels/runtime_switch.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>

#include "host_api/error.h"

namespace enginery {
namespace kernels {

namespace {

std::string lower(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v;
}

std::string allowed_values() {
  std::string names;
  for (Kernel k : kAllKernels) names += std::string(names.empty() ? "" : ", ") + kernel_name(k);
  return "1, on, true (all kernels, the default), 0, off, false (ATen only), a comma list of kernels to keep on, or "
         "of -kernel to turn off; kernels: " +
         names;
}

[[noreturn]] void refuse(const char* value, const std::string& why) {
  throw EngineryError(std::string("environment variable ") + kRuntimeSwitchEnv + " is \"" + value + "\"" + why,
                      kRuntimeSwitchEnv, allowed_values());
}

}  // namespace

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kSwiglu: return "swiglu";
    case Kernel::kRope: return "rope";
    case Kernel::kLogSoftmax: return "log_softmax";
    case Kernel::kAdamw: return "adamw";
    case Kernel::kAccumulate: return "accumulate";
    case Kernel::kFp8Cast: return "fp8_cast";
  }
  return "?";
}

std::array<bool, kAllKernels.size()> kernels_enabled_by(const char* value) {
  std::array<bool, kAllKernels.size()> on;
  on.fill(true);
  if (value == nullptr) return on;
  const std::string v = lower(value);
  if (v.empty() || v == "1" || v == "on" || v == "true") return on;
  if (v == "0" || v == "off" || v == "false") {
    on.fill(false);
    return on;
  }
  if (v.back() == ',') refuse(value, ": an empty kernel name");
  std::istringstream items(v);
  std::string item;
  int positive = 0, negative = 0;
  std::array<bool, kAllKernels.size()> named{};
  while (std::getline(items, item, ',')) {
    const bool minus = !item.empty() && item[0] == '-';
    const std::string name = minus ? item.substr(1) : item;
    if (name.empty()) refuse(value, ": an empty kernel name");
    size_t i = 0;
    while (i < kAllKernels.size() && name != kernel_name(kAllKernels[i])) ++i;
    if (i == kAllKernels.size()) refuse(value, ": \"" + name + "\" is no kernel");
    named[i] = true;
    (minus ? negative : positive) += 1;
  }
  if (positive > 0 && negative > 0) refuse(value, ": kernels to keep and kernels to drop are mixed");
  for (size_t i = 0; i < on.size(); ++i) on[i] = positive > 0 ? named[i] : !named[i];
  return on;
}

bool kernel_enabled(Kernel k) {
  static const auto on = kernels_enabled_by(std::getenv(kRuntimeSwitchEnv));
  return on[static_cast<size_t>(k)];
}

void check_runtime_switch() {
  const auto now = kernels_enabled_by(std::getenv(kRuntimeSwitchEnv));
  for (Kernel k : kAllKernels) {
    if (kernel_enabled(k) == now[static_cast<size_t>(k)]) continue;
    const char* value = std::getenv(kRuntimeSwitchEnv);
    throw EngineryError(std::string("environment variable ") + kRuntimeSwitchEnv + " is now \"" +
                            (value ? value : "") + "\", but this process read it once already and keeps " +
                            enabled_kernels_summary() + " on",
                        kRuntimeSwitchEnv, "its first value, or a new process (set it before the first engine)");
  }
}

std::string enabled_kernels_summary() {
  std::string names;
  size_t count = 0;
  for (Kernel k : kAllKernels) {
    if (!kernel_enabled(k)) continue;
    names += std::string(names.empty() ? "" : ",") + kernel_name(k);
    ++count;
  }
  return count == kAllKernels.size() ? "all" : count == 0 ? "none" : names;
}

}  // namespace kernels
}  // namespace enginery
