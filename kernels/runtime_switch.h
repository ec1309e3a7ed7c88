#pragma once
// ENGINERY_CUDA_KERNELS at run time, so a user can check on their own machine that enginery's CUDA kernels do not
// change a training run (docs/ARCHITECTURE.md, "CUDA kernels"): each kernel switched off sends its callers down
// their ATen composition, in a build that has the kernels.
//   unset, "1", "on", "true"        every kernel on (the default)
//   "0", "off", "false"             every kernel off
//   "swiglu,rope"                   only the kernels named
//   "-adamw,-accumulate"            every kernel but those named
// Any other value is refused, naming the variable, the value and the allowed ones.
#include <array>
#include <string>

namespace enginery {
namespace kernels {

enum class Kernel { kSwiglu, kRope, kLogSoftmax, kAdamw, kAccumulate, kFp8Cast };
inline constexpr std::array<Kernel, 6> kAllKernels = {Kernel::kSwiglu,     Kernel::kRope,       Kernel::kLogSoftmax,
                                                      Kernel::kAdamw,      Kernel::kAccumulate, Kernel::kFp8Cast};
inline constexpr const char* kRuntimeSwitchEnv = "ENGINERY_CUDA_KERNELS";

// swiglu, rope, log_softmax, adamw, accumulate, fp8_cast.
const char* kernel_name(Kernel k);

// Which kernels a value of ENGINERY_CUDA_KERNELS leaves on (nullptr: unset), one flag per kAllKernels entry;
// throws EngineryError for a value outside the grammar above.
std::array<bool, kAllKernels.size()> kernels_enabled_by(const char* value);
// The process's setting, read once.
bool kernel_enabled(Kernel k);
// Where work starts (`enginery train`, a Python engine): refuses a bad value, or one that differs from the value
// the process already read (the kernels would go on with the first).
void check_runtime_switch();
// "all", "none" or the names left on, for the logs.
std::string enabled_kernels_summary();

}  // namespace kernels
}  // namespace enginery
