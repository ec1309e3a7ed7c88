// A checkpoint written by an earlier enginery (tests/data/checkpoints/README.md: the commit and the command) loads
// and resumes where its writer left off: steps 3 and 4 of the resumed run have the loss, grad norm and lr the
// writing run had (step 4 moves by step 3's AdamW update, so the loaded moments count as well as the weights).
// The writer ran on another machine, and ATen picks its fp32 kernels by the CPU's instruction set (AVX2, AVX-512),
// which sum in different orders: on an AVX-512 machine the resumed step 3's loss is 1.1e-7 (one rounding) from the
// writer's and everything else is bitwise. So loss and grad norm are held to 1e-6 of their value and the lr (double
// arithmetic on the step count) to equality; a weight, moment or data position loaded wrong moves a loss that falls
// by a quarter each step (lr 1e-2) by far more. Resume on one machine is bitwise (fsdp_checkpoint_test.cpp).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "support/torch_compat.h"  // compat::remove_all
#include "tests/support/shell_command.h"

namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(ENGINERY_SOURCE_DIR) / "tests/data/checkpoints";

nlohmann::json step_line(const fs::path& metrics, int64_t step) {
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const auto json = nlohmann::json::parse(line);
    if (json.contains("step") && !json.contains("accuracy") && json["step"].get<int64_t>() == step) return json;
  }
  return {};
}

// fixture: a run directory holding the writer's config.toml, metrics.jsonl and its checkpoint of step 2.
void expect_resumes_where_the_writer_left_off(const std::string& fixture) {
  const fs::path source = kFixtures / fixture;
  const fs::path out = fs::temp_directory_path() / ("enginery_ckpt_compat_" + std::to_string(getpid())) / fixture;
  enginery::compat::remove_all(out.parent_path());
  fs::create_directories(out.parent_path());
  fs::copy(source, out, fs::copy_options::recursive);

  const std::string model = (fs::path(ENGINERY_SOURCE_DIR) / "tests/data/models/hf_qwen2_tied").string();
  const auto result = enginery::test_support::run_shell(
      std::string(ENGINERY_EXE) + " train --config " + (source / "compat.toml").string() + " --nproc 2" +
      " --set trainer.default_local_dir=" + out.string() + " --set model.path=" + model + " --resume --plugin-dir " +
      ENGINERY_PLUGIN_DIR + " 2>&1");
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("resumed from"), std::string::npos) << result.output;
  for (int64_t step : {3, 4}) {
    const nlohmann::json written = step_line(source / "metrics.jsonl", step);
    const nlohmann::json resumed = step_line(out / "metrics.jsonl", step);
    ASSERT_FALSE(written.is_null()) << "the fixture's metrics.jsonl has no step " << step;
    ASSERT_FALSE(resumed.is_null()) << result.output;
    for (const char* key : {"loss", "grad_norm"}) {
      const double want = written[key].get<double>();
      EXPECT_NEAR(resumed[key].get<double>(), want, 1e-6 * std::abs(want)) << "step " << step << " " << key;
    }
    EXPECT_EQ(resumed["lr"].get<double>(), written["lr"].get<double>()) << "step " << step;
  }
  enginery::compat::remove_all(out.parent_path());
}

TEST(CheckpointCompatibility, AnFsdpCheckpointOfTheEarlierReleaseResumesWhereItsWriterLeftOff) {
  expect_resumes_where_the_writer_left_off("fsdp_e17f249");
}

}  // namespace
