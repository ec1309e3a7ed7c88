// ENGINERY_CUDA_KERNELS's grammar (kernels/runtime_switch.h): which kernels each value leaves on, and the refusals.
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "kernels/runtime_switch.h"

namespace enginery {
namespace kernels {
namespace {

std::array<bool, kAllKernels.size()> only(std::initializer_list<Kernel> on) {
  std::array<bool, kAllKernels.size()> flags{};
  for (Kernel k : on) flags[static_cast<size_t>(k)] = true;
  return flags;
}

TEST(KernelSwitch, UnsetAndOnKeepEveryKernel) {
  const auto all = only({Kernel::kSwiglu, Kernel::kRope, Kernel::kLogSoftmax, Kernel::kAdamw, Kernel::kAccumulate,
                         Kernel::kFp8Cast});
  EXPECT_EQ(kernels_enabled_by(nullptr), all);
  for (const char* v : {"", "1", "on", "ON", "true"}) EXPECT_EQ(kernels_enabled_by(v), all) << v;
}

TEST(KernelSwitch, OffDropsEveryKernel) {
  for (const char* v : {"0", "off", "False"}) EXPECT_EQ(kernels_enabled_by(v), only({})) << v;
}

TEST(KernelSwitch, ANameListKeepsOnlyThoseAndMinusDropsThose) {
  EXPECT_EQ(kernels_enabled_by("swiglu,rope"), only({Kernel::kSwiglu, Kernel::kRope}));
  EXPECT_EQ(kernels_enabled_by("-adamw,-accumulate"),
            only({Kernel::kSwiglu, Kernel::kRope, Kernel::kLogSoftmax, Kernel::kFp8Cast}));
}

TEST(KernelSwitch, RefusesUnknownNamesAndMixedListsNamingTheVariable) {
  for (const char* v : {"swigl", "yes", "swiglu,-rope", "swiglu,"}) {
    try {
      kernels_enabled_by(v);
      ADD_FAILURE() << v << " was accepted";
    } catch (const EngineryError& e) {
      EXPECT_EQ(e.where(), "ENGINERY_CUDA_KERNELS") << v;
      EXPECT_NE(std::string(e.what()).find(v), std::string::npos) << e.what();
      EXPECT_NE(e.allowed().find("log_softmax"), std::string::npos) << e.allowed();
    }
  }
}

}  // namespace
}  // namespace kernels
}  // namespace enginery
