// Hostile checkpoint metadata: whatever metadata.json says, loading is an EngineryError naming the file and the
// field before any byte is read, never a crash, a hang or half a parameter (plugin/fsdp/CHECKPOINT.md). One real
// single-rank checkpoint is saved for the suite; each test edits a copy of its metadata.json.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>

#include "host_api/error.h"
#include "plugin/fsdp/checkpoint_format.h"
#include "support/torch_compat.h"
#include "tests/fsdp/checkpoint_test_util.h"

namespace enginery {
namespace fsdp_test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
namespace ckpt = fsdp::ckpt;

constexpr const char* kWhere = "ckpt/metadata.json";

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// parse_metadata's EngineryError message, "" when it accepts; any other exception type fails the test.
std::string parse_error(const std::string& text) {
  try {
    ckpt::parse_metadata(text, kWhere);
  } catch (const EngineryError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an EngineryError: " << e.what();
    return e.what();
  }
  return "";
}

class HostileCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() / ("enginery_hostile_ckpt_" + std::to_string(::getpid())));
    fs::create_directories(*root_);
    engine_ = new fsdp::FSDPEngine(saver_args(), tiny_builder(TinyConfig{}));
    engine_->initialize();
    saver_step(*engine_, 1);
    engine_->save_checkpoint((*root_ / "good").string(), 1, 0);
  }
  static void TearDownTestSuite() {
    delete engine_;
    std::error_code ec;
    compat::remove_all(*root_, ec);
    delete root_;
  }

  static json good() { return json::parse(read_text(*root_ / "good" / ckpt::kMetadataFile)); }
  // A copy of the good checkpoint named `name` whose metadata.json is `meta`.
  static fs::path copy_with(const json& meta, const std::string& name) {
    const fs::path dir = *root_ / name;
    fs::copy(*root_ / "good", dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    std::ofstream(dir / ckpt::kMetadataFile, std::ios::trunc) << meta.dump(1);
    return dir;
  }
  static std::string load_error(const fs::path& dir) {
    try {
      engine_->load_checkpoint(dir.string());
    } catch (const EngineryError& e) {
      return e.what();
    }
    return "";
  }
  // The first model file entry and, in it, a segment of an even number >= 2 of elements.
  static std::pair<size_t, size_t> even_model_segment(const json& meta) {
    for (size_t f = 0; f < meta["files"].size(); ++f) {
      if (meta["files"][f]["content"] != "model") continue;
      const json& segments = meta["files"][f]["segments"];
      for (size_t s = 0; s < segments.size(); ++s) {
        const int64_t n = segments[s][3].get<int64_t>() - segments[s][2].get<int64_t>();
        if (n >= 2 && n % 2 == 0) return {f, s};
      }
    }
    ADD_FAILURE() << "no model segment of even length";
    return {0, 0};
  }

  static fs::path* root_;
  static fsdp::FSDPEngine* engine_;
};

fs::path* HostileCheckpoint::root_ = nullptr;
fsdp::FSDPEngine* HostileCheckpoint::engine_ = nullptr;

TEST_F(HostileCheckpoint, TheGoodCopyLoads) { EXPECT_EQ(load_error(copy_with(good(), "plain")), ""); }

// An offset near 2^64 used to wrap offset + count * 4 past the bounds check (SIGSEGV in from_blob).
TEST_F(HostileCheckpoint, SegmentOffsetNear2To64IsRefusedByName) {
  json meta = good();
  const auto [f, s] = even_model_segment(meta);
  meta["files"][f]["segments"][s][4] = uint64_t{18446744073709551612u};
  const fs::path dir = copy_with(meta, "offset");
  const std::string err = load_error(dir);
  EXPECT_NE(err.find((dir / "metadata.json").string()), std::string::npos) << err;
  EXPECT_NE(err.find("segments[" + std::to_string(s) + "].offset"), std::string::npos) << err;
  EXPECT_NE(err.find("out of range"), std::string::npos) << err;
  // In range of int64 but past the file, and misaligned: refused the same way.
  meta["files"][f]["segments"][s][4] = int64_t{9223372036854775804};
  EXPECT_NE(parse_error(meta.dump()).find("offset"), std::string::npos);
  meta["files"][f]["segments"][s][4] = 2;
  EXPECT_NE(parse_error(meta.dump()).find("not a multiple of 4"), std::string::npos);
  meta["files"][f]["segments"][s][4] = meta["files"][f]["bytes"];  // count elements past the end
  EXPECT_NE(parse_error(meta.dump()).find("past the end"), std::string::npos);
}

// "world_size": 0 used to reach rank % world_size (SIGFPE).
TEST_F(HostileCheckpoint, WorldSizeZeroIsRefusedByName) {
  json meta = good();
  meta["world_size"] = 0;
  const fs::path dir = copy_with(meta, "world0");
  const std::string err = load_error(dir);
  EXPECT_NE(err.find((dir / "metadata.json").string() + ": world_size"), std::string::npos) << err;
  EXPECT_NE(err.find("an integer in [1, "), std::string::npos) << err;
  meta["world_size"] = 2;
  meta["fsdp_size"] = 3;
  EXPECT_NE(parse_error(meta.dump()).find("fsdp_size"), std::string::npos);
  meta["fsdp_size"] = 1;
  meta["files"][0]["rank"] = 2;
  EXPECT_NE(parse_error(meta.dump()).find("files[0].rank"), std::string::npos);
}

TEST_F(HostileCheckpoint, NegativeOptimizerStepIsRefusedByName) {
  json meta = good();
  meta["state"]["optimizer"]["step"] = -1;
  const fs::path dir = copy_with(meta, "step");
  const std::string err = load_error(dir);
  EXPECT_NE(err.find("state.optimizer.step"), std::string::npos) << err;
  EXPECT_NE(err.find("is -1, out of range"), std::string::npos) << err;
  meta = good();
  meta["state"]["lr_scheduler"]["step"] = 1.5;
  EXPECT_NE(parse_error(meta.dump()).find("state.lr_scheduler.step' must be an integer"), std::string::npos);
}

// A name leaving the directory is refused by the check, even where the file it names exists and is the right one.
TEST_F(HostileCheckpoint, FileNamesMustStayInsideTheDirectory) {
  fs::copy_file(*root_ / "good" / "model_rank_0.bin", *root_ / "escaped.bin", fs::copy_options::overwrite_existing);
  json meta = good();
  size_t model = 0;
  while (meta["files"][model]["content"] != "model") ++model;
  const std::string field = "files[" + std::to_string(model) + "].name";
  const std::vector<std::pair<std::string, std::string>> cases = {{"../escaped.bin", "leaves its directory"},
                                                                  {(*root_ / "escaped.bin").string(), "is absolute"},
                                                                  {"", "is empty"},
                                                                  {std::string("model\0x", 7), "NUL"},
                                                                  {"sub/../../escaped.bin", "leaves its directory"}};
  for (const auto& [name, why] : cases) {
    meta["files"][model]["name"] = name;
    const std::string err = load_error(copy_with(meta, "names"));
    EXPECT_NE(err.find(field), std::string::npos) << name << ": " << err;
    EXPECT_NE(err.find(why), std::string::npos) << name << ": " << err;
  }
}

// Coverage is by position: two copies of the first half used to pass for the whole (half a parameter of zeros).
TEST_F(HostileCheckpoint, DuplicateHalfSegmentIsNotFullCoverage) {
  json meta = good();
  const auto [f, s] = even_model_segment(meta);
  json& segments = meta["files"][f]["segments"];
  json half = segments[s];
  half[3] = half[2].get<int64_t>() + (half[3].get<int64_t>() - half[2].get<int64_t>()) / 2;
  segments[s] = half;
  segments.push_back(half);
  const std::string name = meta["params"][half[0].get<size_t>()]["name"];
  const std::string err = load_error(copy_with(meta, "twice"));
  EXPECT_NE(err.find("of '" + name + "' (param) is stored twice"), std::string::npos) << err;
  segments.erase(segments.size() - 1);
  EXPECT_NE(parse_error(meta.dump()).find("stored in no file"), std::string::npos);
}

// Every fault is found before a tensor changes: with the model file intact and the optimizer file cut short, a
// failed load leaves weights, moments and step count as they were.
TEST_F(HostileCheckpoint, FailedLoadChangesNothing) {
  const fs::path dir = copy_with(good(), "cut");
  const fs::path optim = dir / "optim_rank_0.bin";
  fs::resize_file(optim, fs::file_size(optim) - 4);
  saver_step(*engine_, 2);  // the engine's state now differs from the checkpoint's
  const TensorMap before = full_state(*engine_);
  const int64_t step_before = engine_->optimizer()->step_count();
  const std::string err = load_error(dir);
  EXPECT_NE(err.find(optim.string()), std::string::npos) << err;
  expect_bitwise_equal(full_state(*engine_), before, "after a failed load");
  EXPECT_EQ(engine_->optimizer()->step_count(), step_before);
}

TEST(CheckpointTiling, IsCheckedByPositionNotByCount) {
  EXPECT_FALSE(ckpt::tiling_fault({{4, 8}, {0, 4}}, 0, 8));
  EXPECT_FALSE(ckpt::tiling_fault({{0, 0}, {0, 8}, {8, 8}}, 0, 8));  // empty ranges count for nothing
  EXPECT_FALSE(ckpt::tiling_fault({}, 3, 3));
  const auto twice = ckpt::tiling_fault({{0, 4}, {0, 4}}, 0, 8);  // 8 elements counted, 4 covered
  ASSERT_TRUE(twice);
  EXPECT_TRUE(twice->twice);
  EXPECT_EQ(twice->element, 0);
  const auto gap = ckpt::tiling_fault({{0, 3}, {4, 8}}, 0, 8);
  ASSERT_TRUE(gap);
  EXPECT_FALSE(gap->twice);
  EXPECT_EQ(gap->element, 3);
  const auto overlap = ckpt::tiling_fault({{0, 5}, {4, 8}}, 0, 8);
  ASSERT_TRUE(overlap);
  EXPECT_TRUE(overlap->twice);
  EXPECT_EQ(overlap->element, 4);
  EXPECT_EQ(ckpt::tiling_fault({{0, 5}}, 0, 8)->element, 5);
}

// A FIFO where a data file or metadata.json should be is refused at once, naming it, instead of blocking open().
TEST_F(HostileCheckpoint, FifoInPlaceOfAFileIsRefusedWithoutBlocking) {
  const fs::path dir = copy_with(good(), "fifo");
  for (const char* name : {"model_rank_0.bin", "metadata.json"}) {
    const fs::path path = dir / name;
    fs::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    auto result = std::async(std::launch::async, [&] { return load_error(dir); });
    if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // releases a reader blocked in open()
      if (fd >= 0) ::close(fd);
      result.wait();
      FAIL() << "load_checkpoint blocked on the FIFO " << path;
    }
    const std::string err = result.get();
    EXPECT_NE(err.find(path.string()), std::string::npos) << err;
    EXPECT_NE(err.find("a FIFO, not a regular file"), std::string::npos) << err;
  }
}

// Every leaf of a real metadata.json replaced by each hostile value, and seeded byte-level mutations: the parser
// accepts or throws EngineryError naming the file, nothing else (parse_error fails the test on another type).
TEST_F(HostileCheckpoint, MutatedMetadataIsAnEngineryErrorOrAccepted) {
  const json meta = good();
  const json flat = meta.flatten();  // its keys are the JSON pointers of the leaves
  const std::vector<json> hostile = {-1, 0, int64_t{9223372036854775807}, uint64_t{18446744073709551615u}, 1.5, 1e300,
                                     "x", nullptr, json::array(), json::object()};
  // Rows of one kind repeat: the first two segments of each file stand for the rest (keeps the test cheap), and
  // "config" is for people, never read back.
  auto worth_mutating = [](const std::string& pointer) {
    const auto at = pointer.find("/segments/");
    return pointer.rfind("/config", 0) != 0 &&
           (at == std::string::npos || pointer.compare(at, 12, "/segments/0/") == 0 ||
            pointer.compare(at, 12, "/segments/1/") == 0);
  };
  size_t refused = 0, tried = 0;
  for (auto it = flat.begin(); it != flat.end(); ++it) {
    if (!worth_mutating(it.key())) continue;
    ++tried;
    for (const json& value : hostile) {
      json mutated = meta;
      mutated[json::json_pointer(it.key())] = value;
      const std::string err = parse_error(mutated.dump());
      if (err.empty()) continue;
      ++refused;
      EXPECT_NE(err.find(kWhere), std::string::npos) << it.key() << ": " << err;
    }
  }
  EXPECT_GT(refused, tried);
  const std::string text = meta.dump();
  std::mt19937 gen(21);
  for (int i = 0; i < 1000; ++i) {
    std::string bytes = text;
    const int flips = 1 + static_cast<int>(gen() % 4);
    for (int k = 0; k < flips; ++k) bytes[gen() % bytes.size()] = static_cast<char>(gen() % 256);
    if (i % 7 == 0) bytes.resize(gen() % bytes.size());
    parse_error(bytes);
  }
  // Nesting a copy would recurse through: refused by depth, not by a stack overflow.
  std::string nested(200000, '[');
  nested += std::string(200000, ']');
  const std::string deep_text = text.substr(0, text.size() - 1) + ", \"deep\": " + nested + "}";
  EXPECT_NE(parse_error(deep_text).find("nested deeper"), std::string::npos);
}

}  // namespace
}  // namespace fsdp_test
}  // namespace enginery
