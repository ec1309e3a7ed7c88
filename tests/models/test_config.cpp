// config.json parsing: both forms, defaults of transformers, and errors that name the file and the field.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "host_api/error.h"
#include "models/model_args.h"
#include "models/model_factory.h"
#include "models/causal_lm.h"
#include "test_util.h"

namespace enginery {
namespace models {
namespace {

const char* kBase = R"("vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                       "num_attention_heads": 2)";

std::string config(const std::string& model_type, const std::string& extra = "") {
  return "{\"model_type\": \"" + model_type + "\", " + kBase + (extra.empty() ? "" : ", " + extra) + "}";
}

// The EngineryError message of `f`, or "" when it does not throw.
template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const EngineryError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, LongStandingRopeFields) {
  auto a = parse_hf_config(config("llama", R"("rope_theta": 500000.0, "torch_dtype": "bfloat16",
      "rope_scaling": {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192})"),
                           "x/config.json");
  EXPECT_EQ(a.rope.type, "llama3");
  EXPECT_DOUBLE_EQ(a.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(a.rope.factor, 32.0);
  EXPECT_EQ(a.rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(a.dtype, "bfloat16");
  EXPECT_EQ(a.num_key_value_heads, 2);  // defaults to the query heads
  EXPECT_EQ(a.head_dim, 8);             // hidden / heads
}

TEST(ModelConfig, Transformers5RopeParameters) {
  auto a = parse_hf_config(config("qwen2", R"("dtype": "float16",
      "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0})"),
                           "x/config.json");
  EXPECT_EQ(a.rope.type, "default");
  EXPECT_DOUBLE_EQ(a.rope.theta, 1000000.0);
  EXPECT_EQ(a.dtype, "float16");
  EXPECT_TRUE(a.attention_bias);  // qwen2 always has q/k/v biases
  auto nested = parse_hf_config(config("llama", R"("rope_parameters": {"full_attention":
      {"rope_type": "linear", "rope_theta": 20000.0, "factor": 2.0}})"),
                                "x/config.json");
  EXPECT_EQ(nested.rope.type, "linear");
  EXPECT_DOUBLE_EQ(nested.rope.theta, 20000.0);
}

TEST(ModelConfig, Qwen3DefaultsAndQkNorm) {
  auto a = parse_hf_config(config("qwen3"), "x/config.json");
  EXPECT_TRUE(a.qk_norm);
  EXPECT_EQ(a.head_dim, 128);  // Qwen3Config's default, not hidden / heads
  EXPECT_FALSE(a.attention_bias);
}

TEST(ModelConfig, UnknownModelTypeNamesFileFieldAndAllowed) {
  auto msg = error_of([] { parse_hf_config(config("gpt2"), "/m/config.json"); });
  EXPECT_NE(msg.find("/m/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model_type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gpt2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("qwen3"), std::string::npos) << msg;
}

TEST(ModelConfig, MissingAndMistypedFieldsAreNamed) {
  auto missing = error_of([] {
    parse_hf_config(R"({"model_type": "llama", "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 1,
                        "num_attention_heads": 2})",
                    "/m/config.json");
  });
  EXPECT_NE(missing.find("/m/config.json: intermediate_size"), std::string::npos) << missing;
  auto mistyped = error_of([] { parse_hf_config(config("llama", R"("num_key_value_heads": "2")"), "/m/config.json"); });
  EXPECT_NE(mistyped.find("num_key_value_heads"), std::string::npos) << mistyped;
  auto rope = error_of([] {
    parse_hf_config(config("llama", R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})"), "/m/config.json");
  });
  EXPECT_NE(rope.find("rope_scaling.low_freq_factor"), std::string::npos) << rope;
  auto yarn = error_of([] {
    parse_hf_config(config("llama", R"("rope_parameters": {"rope_type": "yarn", "factor": 8.0})"), "/m/config.json");
  });
  EXPECT_NE(yarn.find("rope_parameters.rope_type"), std::string::npos) << yarn;
  auto gqa = error_of([] { parse_hf_config(config("llama", R"("num_key_value_heads": 3)"), "/m/config.json"); });
  EXPECT_NE(gqa.find("num_key_value_heads"), std::string::npos) << gqa;
}

TEST(ModelConfig, MissingConfigFileIsNamed) {
  testing::TempDir tmp;
  auto msg = error_of([&] { read_hf_config(tmp.str()); });
  EXPECT_NE(msg.find(tmp.str() + "/config.json"), std::string::npos) << msg;
}

TEST(ModelConfig, BuiltinConfigsRoundTripThroughTheirJson) {
  for (const char* name : {"qwen2-tiny", "llama-tiny", "qwen3-tiny"}) {
    auto a = builtin_args(name);
    auto b = parse_hf_config(a.raw_config_json, name);
    EXPECT_EQ(a.model_type, b.model_type);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.rope.type, b.rope.type);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
    EXPECT_EQ(a.attention_bias, b.attention_bias);
  }
  auto msg = error_of([] { builtin_args("gpt-tiny"); });
  EXPECT_NE(msg.find("builtin:qwen2-tiny"), std::string::npos) << msg;
}

TEST(ModelConfig, BuiltinModelsAreSmallAndSeeded) {
  for (const char* name : {"builtin:qwen2-tiny", "builtin:llama-tiny", "builtin:qwen3-tiny"}) {
    ModelConfig cfg;
    cfg.path = name;
    auto a = build_model(cfg, "language_model");
    auto b = build_model(cfg, "language_model");
    int64_t count = 0;
    auto pa = a->named_parameters(), pb = b->named_parameters();
    for (auto& p : pa) {
      count += p.value().numel();
      EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << name << " " << p.key();
    }
    EXPECT_GT(count, 50000) << name;
    EXPECT_LT(count, 1000000) << name;
    auto other = build_model(cfg, "language_model", {torch::kCPU, /*seed=*/7});
    EXPECT_FALSE(torch::equal(other->named_parameters()["model.embed_tokens.weight"], pa["model.embed_tokens.weight"]));
  }
}

// A config with `key` set to the JSON text `value` (replacing kBase's value when it has one), spliced in as text so
// that the parser sees exactly what the test wrote.
std::string config_with(const std::string& model_type, const std::string& key, const std::string& value) {
  auto j = nlohmann::json::parse(config(model_type));
  j.erase(key);
  std::string text = j.dump();
  text.pop_back();  // the closing brace
  return text + ", \"" + key + "\": " + value + "}";
}

// Absurd sizes are refused with the key and the allowed range before anything is allocated.
TEST(ModelConfigHostile, AbsurdSizesNameKeyAndRange) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"hidden_size", "1000000000000", "field 'hidden_size' is 1000000000000, out of range (allowed: an integer in [1, 262144])"},
      {"hidden_size", "1e12", "field 'hidden_size' must be an integer (allowed: an integer in [1, 262144])"},
      {"vocab_size", "1000000000000000", "field 'vocab_size' is 1000000000000000, out of range"},
      {"num_hidden_layers", "-3", "field 'num_hidden_layers' is -3, out of range (allowed: an integer in [1, 4096])"},
      {"intermediate_size", "18446744073709551615", "field 'intermediate_size' is 18446744073709551615, out of range"},
      {"max_position_embeddings", "0", "field 'max_position_embeddings' is 0, out of range"},
      {"head_dim", "7", "head_dim must be even"},
  };
  for (const auto& [key, value, expected] : cases) {
    const auto msg = error_of([&] { parse_hf_config(config_with("llama", key, value), "/m/config.json"); });
    EXPECT_NE(msg.find("/m/config.json: " + key), std::string::npos) << key << "=" << value << ": " << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << key << "=" << value << ": " << msg;
  }
  // Without head_dim, llama and qwen2 divide hidden_size by the heads: it must divide.
  const auto msg = error_of([] { parse_hf_config(config_with("qwen2", "hidden_size", "17"), "/m/config.json"); });
  EXPECT_NE(msg.find("/m/config.json: hidden_size: hidden_size 17 is not a multiple of num_attention_heads 2"),
            std::string::npos)
      << msg;
}

// Values that make every log-prob NaN or fail only at the first save are refused at load, naming key and range.
TEST(ModelConfigHostile, ValuesThatCannotBeRightAreRefused) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"rope_theta", "0", "field 'rope_theta' is 0, out of range (allowed: a finite number in (0, "},
      {"rope_theta", "-10000.0", "field 'rope_theta' is -10000"},
      {"rms_norm_eps", "-1e-6", "field 'rms_norm_eps' is -1e-06, out of range (allowed: a finite number in [0, 1])"},
      {"torch_dtype", "\"float64\"", "unsupported torch_dtype 'float64' (allowed: float32, bfloat16, float16)"},
      {"dtype", "\"int8\"", "unsupported dtype 'int8' (allowed: float32, bfloat16, float16)"},
      {"rope_scaling", R"({"rope_type": "linear", "factor": 0})", "field 'rope_scaling.factor' is 0"},
      {"rope_scaling",
       R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4,
           "original_max_position_embeddings": 8192})",
       "field 'rope_scaling.high_freq_factor' is 4, out of range"},
      {"rope_scaling",
       R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
           "original_max_position_embeddings": 1e300})",
       "field 'rope_scaling.original_max_position_embeddings'"},
      {"rope_parameters", R"({"rope_type": 3})", "field 'rope_parameters.rope_type' must be a string"},
      {"rope_parameters", R"({"rope_type": "default", "rope_theta": 0})", "field 'rope_parameters.rope_theta' is 0"},
  };
  for (const auto& [key, value, expected] : cases) {
    const auto msg = error_of([&] { parse_hf_config(config_with("llama", key, value), "/m/config.json"); });
    EXPECT_NE(msg.find("/m/config.json: " + key), std::string::npos) << key << "=" << value << ": " << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << key << "=" << value << ": " << msg;
  }
  // The accepted dtypes still load, and rms_norm_eps 0 is allowed.
  for (const char* dtype : {"\"float32\"", "\"bfloat16\"", "\"float16\""}) {
    EXPECT_EQ(error_of([&] { parse_hf_config(config_with("qwen3", "torch_dtype", dtype), "c"); }), "") << dtype;
  }
  EXPECT_EQ(error_of([] { parse_hf_config(config_with("qwen3", "rms_norm_eps", "0"), "c"); }), "");
}

// A config.json that is a FIFO is refused at once, naming it, instead of blocking open().
TEST(ModelConfigHostile, FifoConfigIsRefusedWithoutBlocking) {
  testing::TempDir tmp;
  const std::string path = tmp.sub("config.json");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto result = std::async(std::launch::async, [&] { return error_of([&] { read_hf_config(tmp.str()); }); });
  if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);  // releases a reader blocked in open()
    if (fd >= 0) ::close(fd);
    result.wait();
    FAIL() << "read_hf_config blocked on the FIFO " << path;
  }
  const std::string msg = result.get();
  EXPECT_NE(msg.find(path + ": cannot open the model's config.json: it is a FIFO"), std::string::npos) << msg;
  // A directory where the file should be is refused the same way.
  std::filesystem::remove(path);
  std::filesystem::create_directories(path);
  EXPECT_NE(error_of([&] { read_hf_config(tmp.str()); }).find("it is a directory"), std::string::npos);
}

}  // namespace
}  // namespace models
}  // namespace enginery
