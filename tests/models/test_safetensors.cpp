// safetensors I/O: load -> save -> load is bit-identical for single-file and sharded checkpoints, through the raw
// reader/writer and through build_model / save_hf; the HF-written sharded fixture is read through its index.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>

#include "host_api/error.h"
#include "models/model_factory.h"
#include "models/safetensors.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

using testing::data_dir;
namespace fs = std::filesystem;

// Bitwise equality (torch::equal would treat NaN payloads and -0.0 loosely).
void expect_bit_identical(const NamedTensors& a, const NamedTensors& b) {
  std::map<std::string, torch::Tensor> mb(b.begin(), b.end());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(mb.count(name)) << name;
    const auto& u = mb[name];
    ASSERT_EQ(t.scalar_type(), u.scalar_type()) << name;
    ASSERT_EQ(t.sizes(), u.sizes()) << name;
    auto tc = t.contiguous(), uc = u.contiguous();
    EXPECT_EQ(0, std::memcmp(tc.data_ptr(), uc.data_ptr(), tc.numel() * tc.element_size())) << name;
  }
}

TEST(Safetensors, ReadsTransformersShardedCheckpoint) {
  auto tensors = read_safetensors_dir(data_dir("hf_llama_gqa"));
  std::map<std::string, torch::Tensor> m(tensors.begin(), tensors.end());
  EXPECT_EQ(m.size(), 21u);  // embed + 2 x 9 + norm + lm_head
  EXPECT_EQ(m.at("model.embed_tokens.weight").sizes(), (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(m.at("model.layers.1.self_attn.k_proj.weight").sizes(), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(m.at("lm_head.weight").scalar_type(), torch::kFloat);
}

TEST(Safetensors, RoundTripSingleAndShardedIsBitIdentical) {
  testing::TempDir tmp;
  auto original = read_safetensors_dir(data_dir("hf_llama_gqa"));
  // Mixed dtypes, a scalar-free empty tensor and odd sizes.
  original.emplace_back("extra.bf16", torch::randn({3, 5}).to(torch::kBFloat16));
  original.emplace_back("extra.f16", torch::randn({7}).to(torch::kHalf));
  original.emplace_back("extra.empty", torch::zeros({0, 4}));
  write_safetensors_dir(tmp.sub("single"), original, 0);
  EXPECT_TRUE(fs::exists(tmp.sub("single/model.safetensors")));
  auto single = read_safetensors_dir(tmp.sub("single"));
  expect_bit_identical(original, single);

  write_safetensors_dir(tmp.sub("sharded"), single, 20000);
  EXPECT_TRUE(fs::exists(tmp.sub("sharded/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(tmp.sub("sharded/model.safetensors")));
  auto sharded = read_safetensors_dir(tmp.sub("sharded"));
  expect_bit_identical(original, sharded);
  auto index = testing::read_json(tmp.sub("sharded/model.safetensors.index.json"));
  EXPECT_GT(index["metadata"]["total_size"].get<int64_t>(), 100000);
  EXPECT_EQ(index["weight_map"].size(), original.size());

  // Saving what was loaded writes the same bytes.
  write_safetensors_dir(tmp.sub("sharded2"), sharded, 20000);
  for (const auto& entry : fs::directory_iterator(tmp.sub("sharded"))) {
    const auto name = entry.path().filename().string();
    EXPECT_EQ(testing::read_bytes(entry.path().string()), testing::read_bytes(tmp.sub("sharded2/" + name))) << name;
  }
}

TEST(Safetensors, ModelLoadSaveLoadIsBitIdentical) {
  testing::TempDir tmp;
  for (const char* fixture : {"hf_llama_gqa", "hf_qwen2_tied", "hf_qwen3_qknorm"}) {
    ModelConfig cfg;
    cfg.path = data_dir(fixture);
    auto model = build_model(cfg, "language_model");
    for (int64_t shard : {int64_t{0}, int64_t{30000}}) {
      const auto out = tmp.sub(std::string(fixture) + "_" + std::to_string(shard));
      save_hf(*model, out, shard);
      EXPECT_EQ(fs::exists(out + "/model.safetensors.index.json"), shard > 0) << out;
      expect_bit_identical(read_safetensors_dir(cfg.path), read_safetensors_dir(out));
      ModelConfig again_cfg;
      again_cfg.path = out;
      auto again = build_model(again_cfg, "language_model");
      auto pa = model->named_parameters(), pb = again->named_parameters();
      for (auto& p : pa) {
        auto a = p.value().contiguous(), b = pb[p.key()].contiguous();
        EXPECT_EQ(0, std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size())) << p.key();
      }
      EXPECT_EQ(testing::read_bytes(out + "/config.json"), testing::read_bytes(cfg.path + "/config.json"));
    }
  }
}

TEST(Safetensors, Bf16CheckpointRoundTripsThroughFp32Parameters) {
  testing::TempDir tmp;
  ModelConfig cfg;
  cfg.path = "builtin:qwen3-tiny";
  auto model = build_model(cfg, "language_model");
  // Rewrite the config with dtype bfloat16: save_hf then stores bf16, and bf16 -> fp32 -> bf16 is exact.
  save_hf(*model, tmp.sub("fp32"), 0);
  auto text = testing::read_bytes(tmp.sub("fp32/config.json"));
  const auto pos = text.find("\"float32\"");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 9, "\"bfloat16\"");
  testing::write_text(tmp.sub("fp32/config.json"), text);
  ModelConfig c1;
  c1.path = tmp.sub("fp32");
  auto m1 = build_model(c1, "language_model");
  save_hf(*m1, tmp.sub("bf16a"), 0);
  ModelConfig c2;
  c2.path = tmp.sub("bf16a");
  save_hf(*build_model(c2, "language_model"), tmp.sub("bf16b"), 0);
  auto a = read_safetensors_dir(tmp.sub("bf16a")), b = read_safetensors_dir(tmp.sub("bf16b"));
  EXPECT_EQ(a.front().second.scalar_type(), torch::kBFloat16);
  expect_bit_identical(a, b);
}

TEST(Safetensors, CorruptFilesAreNamed) {
  testing::TempDir tmp;
  testing::write_text(tmp.sub("model.safetensors"), "xx");
  try {
    read_safetensors_dir(tmp.str());
    FAIL() << "expected an error";
  } catch (const EngineryError& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.sub("model.safetensors")), std::string::npos) << e.what();
  }
  testing::TempDir empty;
  EXPECT_THROW(read_safetensors_dir(empty.str()), EngineryError);
}

// A safetensors file: the 8-byte little-endian header length, `header`, then `data_bytes` zero bytes.
std::string safetensors_bytes(const std::string& header, size_t data_bytes, uint64_t header_len) {
  std::string out(8, '\0');
  std::memcpy(&out[0], &header_len, 8);
  return out + header + std::string(data_bytes, '\0');
}
std::string safetensors_bytes(const std::string& header, size_t data_bytes) {
  return safetensors_bytes(header, data_bytes, header.size());
}

// The EngineryError message of reading `bytes` as <tmp>/model.safetensors, "" when it is accepted; any other
// exception type fails the test.
std::string read_error(const testing::TempDir& tmp, const std::string& bytes) {
  testing::write_text(tmp.sub("model.safetensors"), bytes);
  try {
    read_safetensors_dir(tmp.str());
  } catch (const EngineryError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an EngineryError: " << e.what();
  }
  return "";
}

// Each structural error of a header is an EngineryError naming the file, the tensor and what is wrong.
TEST(SafetensorsHostile, StructuralErrorsNameFileAndTensor) {
  testing::TempDir tmp;
  const std::string file = tmp.sub("model.safetensors");
  struct Case {
    std::string header;
    size_t data_bytes;
    std::string expected;  // besides the file name
  };
  const std::vector<Case> cases = {
      {R"([1, 2])", 0, "header must be a JSON object, not array"},
      {R"({"w": {"dtype": "F32", "shape": [-2, 2], "data_offsets": [0, 16]}})", 16, ": w: dimension 0 of 'shape' is -2"},
      {R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]}})", 16,
       ": w: 'shape' has more elements"},
      {R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 1000]}})", 16, ": w: data_offsets [0, 1000]"},
      {R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 16, ": w: data_offsets [8, 4]"},
      {R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16, ": w: data_offsets span 16 bytes"},
      {R"({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", 16, ": w: unsupported tensor dtype 'F64'"},
      {R"({"w": {"dtype": 3, "shape": [2], "data_offsets": [0, 8]}})", 8, ": w: field 'dtype' must be a string"},
      {R"({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}})", 8, ": w: field 'shape' must be an array"},
      {R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", 8, ": w: field 'data_offsets' must be"},
      {R"({"w": [1]})", 8, ": w: tensor entry must be a JSON object"},
      {R"({"__metadata__": [1]})", 0, "__metadata__ must be a JSON object"},
      {R"({"w": {"dtype": "F32", "shape": [2]}})", 8, ": w: missing field 'data_offsets'"},
  };
  for (const auto& c : cases) {
    const std::string err = read_error(tmp, safetensors_bytes(c.header, c.data_bytes));
    EXPECT_NE(err.find(file), std::string::npos) << c.header << ": " << err;
    EXPECT_NE(err.find(c.expected), std::string::npos) << c.header << ": " << err;
  }
}

// Overlapping data_offsets would alias one tensor to another.
TEST(SafetensorsHostile, OverlappingOffsetsAreRefused) {
  testing::TempDir tmp;
  const std::string err = read_error(tmp, safetensors_bytes(R"({
      "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
      "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})", 24));
  EXPECT_NE(err.find(tmp.sub("model.safetensors") + ": b: data_offsets [8, 24) overlap those of 'a' [0, 16)"),
            std::string::npos)
      << err;
  // Empty tensors share offsets harmlessly; adjacent tensors do not overlap.
  EXPECT_EQ(read_error(tmp, safetensors_bytes(R"({
      "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
      "e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]},
      "b": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]}})", 24)),
            "");
}

// A header whose length leaves the data section off 4-byte alignment (nothing in the format forbids it): the F32
// tensor comes back aligned, with its values.
TEST(SafetensorsHostile, MisalignedTensorsAreCopiedOutAligned) {
  testing::TempDir tmp;
  const std::string header = R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}} )";
  ASSERT_NE((8 + header.size()) % 4, 0u);
  std::string bytes = safetensors_bytes(header, 0);
  const float values[3] = {1.5f, -2.0f, 3.25f};
  bytes.append(reinterpret_cast<const char*>(values), sizeof(values));
  testing::write_text(tmp.sub("model.safetensors"), bytes);
  SafetensorsFile file(tmp.sub("model.safetensors"));
  const torch::Tensor w = file.tensor("w");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data_ptr()) % alignof(float), 0u);
  EXPECT_TRUE(torch::equal(w, torch::tensor({1.5f, -2.0f, 3.25f})));
}

TEST(SafetensorsHostile, AbsurdHeaderLengthIsRefused) {
  testing::TempDir tmp;
  const std::string header = R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  for (uint64_t len : {uint64_t{1} << 63, ~uint64_t{0}, uint64_t{header.size() + 5}}) {
    const std::string err = read_error(tmp, safetensors_bytes(header, 4, len));
    EXPECT_NE(err.find(tmp.sub("model.safetensors") + ": header length " + std::to_string(len)), std::string::npos)
        << err;
  }
}

// Seeded mutations of a valid file's bytes, through the public header parser: accepted or an EngineryError naming
// the file, never another exception type or a crash.
TEST(SafetensorsHostile, MutatedHeadersAreEngineryErrorsOrAccepted) {
  const std::string good = safetensors_bytes(R"({"__metadata__": {"format": "pt"},
      "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
      "b": {"dtype": "F16", "shape": [3], "data_offsets": [16, 22]}})", 24);
  EXPECT_EQ(parse_safetensors_header(good.data(), good.size(), "m.safetensors").entries.size(), 2u);
  std::mt19937 gen(21);
  for (int i = 0; i < 5000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(gen() % 4);
    for (int k = 0; k < flips; ++k) bytes[8 + gen() % (bytes.size() - 8)] = "0123456789-[]{},:\"e.x"[gen() % 22];
    if (i % 5 == 0) bytes[gen() % 8] = static_cast<char>(gen() % 256);
    if (i % 7 == 0) bytes.resize(gen() % bytes.size());
    try {
      parse_safetensors_header(bytes.data(), bytes.size(), "m.safetensors");
    } catch (const EngineryError& e) {
      EXPECT_NE(std::string(e.what()).find("m.safetensors"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an EngineryError: " << e.what();
    }
  }
}

// A FIFO where a shard should be is refused at once, naming it, instead of blocking open().
TEST(SafetensorsHostile, FifoIsRefusedWithoutBlocking) {
  testing::TempDir tmp;
  const std::string path = tmp.sub("model.safetensors");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto result = std::async(std::launch::async, [&] {
    try {
      read_safetensors_dir(tmp.str());
    } catch (const EngineryError& e) {
      return std::string(e.what());
    }
    return std::string();
  });
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // releases a reader blocked in open()
    if (fd >= 0) ::close(fd);
    result.wait();
    FAIL() << "read_safetensors_dir blocked on the FIFO " << path;
  }
  const std::string err = result.get();
  EXPECT_NE(err.find(path + ": cannot open safetensors file: it is a FIFO, not a regular file"), std::string::npos)
      << err;
}

// Shard names in model.safetensors.index.json stay inside the model directory: refused by the check, even where
// the file they name exists and is valid.
TEST(SafetensorsHostile, IndexNamesMustStayInsideTheDirectory) {
  testing::TempDir tmp;
  write_safetensors(tmp.sub("outside.safetensors"), {{"w", torch::ones({2})}});
  const std::string model = tmp.sub("model");
  std::filesystem::create_directories(model);
  const std::string index = model + "/model.safetensors.index.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\"../outside.safetensors\"", "leaves its directory"},
      {"\"" + tmp.sub("outside.safetensors") + "\"", "is absolute"},
      {"\"\"", "is empty"},
      {"\"a\\u0000b\"", "NUL"},
      {"7", "must be a file name"}};
  for (const auto& [shard, why] : cases) {
    testing::write_text(index, "{\"weight_map\": {\"w\": " + shard + "}}");
    std::string err;
    try {
      read_safetensors_dir(model);
    } catch (const EngineryError& e) {
      err = e.what();
    }
    EXPECT_NE(err.find(index + ": weight_map.w"), std::string::npos) << shard << ": " << err;
    EXPECT_NE(err.find(why), std::string::npos) << shard << ": " << err;
  }
}

}  // namespace
}  // namespace models
}  // namespace enginery
