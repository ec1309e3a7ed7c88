// What the trainer refuses before any rank starts that the config parser cannot know alone (trainer/preflight.h).
#include <gtest/gtest.h>

#include "host_api/error.h"
#include "trainer/preflight.h"
#include "config/train_config.h"

namespace enginery {
namespace {

// enginery train gives every rank its own rows, so a sequence group would train on different data (wrong
// gradients, tokens counted per rank): refused by name where it is set, before any rank starts.
TEST(Preflight, UlyssesSequenceParallelismIsRefusedByTheTrainer) {
  const TrainConfig on = train_config_from_overrides(
      {"engine.strategy=\"fsdp2\"", "engine.fsdp2.ulysses_sequence_parallel_size=2"}, "--set");
  try {
    refuse_sequence_parallel(on);
    FAIL() << "ulysses_sequence_parallel_size = 2 was accepted by enginery train";
  } catch (const EngineryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("engine.fsdp2.ulysses_sequence_parallel_size"), std::string::npos) << what;
    EXPECT_NE(what.find("enginery.verl"), std::string::npos) << what;
    EXPECT_NE(what.find("(allowed: 1, or leave it out)"), std::string::npos) << what;
  }
  const TrainConfig one = train_config_from_overrides(
      {"engine.strategy=\"fsdp2\"", "engine.fsdp2.ulysses_sequence_parallel_size=1"}, "--set");
  EXPECT_NO_THROW(refuse_sequence_parallel(one));
}

}  // namespace
}  // namespace enginery
