#include "conformance/hf_fixture.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "host_api/error.h"

namespace enginery {
namespace conformance {
namespace {

constexpr int64_t kVocab = 160;  // >= kTokenLimit
constexpr int64_t kHidden = 32;
constexpr int64_t kIntermediate = 48;
constexpr int64_t kLayers = 2;
constexpr int64_t kHeads = 4;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kHeadDim = kHidden / kHeads;

// Qwen2ForCausalLM's parameter names and shapes (transformers' modeling_qwen2: q/k/v projections carry biases,
// o_proj and the MLP do not).
std::vector<std::pair<std::string, std::vector<int64_t>>> qwen2_layout() {
  std::vector<std::pair<std::string, std::vector<int64_t>>> layout = {{"model.embed_tokens.weight", {kVocab, kHidden}}};
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layout.push_back({p + "input_layernorm.weight", {kHidden}});
    layout.push_back({p + "self_attn.q_proj.weight", {kHeads * kHeadDim, kHidden}});
    layout.push_back({p + "self_attn.q_proj.bias", {kHeads * kHeadDim}});
    layout.push_back({p + "self_attn.k_proj.weight", {kKvHeads * kHeadDim, kHidden}});
    layout.push_back({p + "self_attn.k_proj.bias", {kKvHeads * kHeadDim}});
    layout.push_back({p + "self_attn.v_proj.weight", {kKvHeads * kHeadDim, kHidden}});
    layout.push_back({p + "self_attn.v_proj.bias", {kKvHeads * kHeadDim}});
    layout.push_back({p + "self_attn.o_proj.weight", {kHidden, kHeads * kHeadDim}});
    layout.push_back({p + "post_attention_layernorm.weight", {kHidden}});
    layout.push_back({p + "mlp.gate_proj.weight", {kIntermediate, kHidden}});
    layout.push_back({p + "mlp.up_proj.weight", {kIntermediate, kHidden}});
    layout.push_back({p + "mlp.down_proj.weight", {kHidden, kIntermediate}});
  }
  layout.push_back({"model.norm.weight", {kHidden}});
  layout.push_back({"lm_head.weight", {kVocab, kHidden}});
  return layout;
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw EngineryError("cannot write the fixture file", path.string());
}

}  // namespace

HfFixture write_qwen2_fixture(const std::string& dir) {
  std::filesystem::create_directories(dir);
  HfFixture fixture{dir, {}};
  auto generator = at::detail::createCPUGenerator(20261202);
  for (const auto& [name, shape] : qwen2_layout()) {
    auto r = at::randn(shape, generator, torch::dtype(torch::kFloat));
    const bool norm = name.find("norm") != std::string::npos;
    fixture.tensors.emplace_back(name, norm ? 1.0 + 0.1 * r : 0.1 * r);
  }

  nlohmann::json config = {{"architectures", {"Qwen2ForCausalLM"}},
                           {"model_type", "qwen2"},
                           {"vocab_size", kVocab},
                           {"hidden_size", kHidden},
                           {"intermediate_size", kIntermediate},
                           {"num_hidden_layers", kLayers},
                           {"num_attention_heads", kHeads},
                           {"num_key_value_heads", kKvHeads},
                           {"max_position_embeddings", 128},
                           {"rms_norm_eps", 1e-6},
                           {"rope_theta", 10000.0},
                           {"hidden_act", "silu"},
                           {"tie_word_embeddings", false},
                           {"torch_dtype", "float32"}};
  write_file(std::filesystem::path(dir) / "config.json", config.dump(2));

  // safetensors: u64 little-endian header length, the JSON header, then the raw little-endian data.
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  std::string data;
  for (const auto& [name, tensor] : fixture.tensors) {
    const size_t begin = data.size();
    data.append(static_cast<const char*>(tensor.data_ptr()), tensor.numel() * sizeof(float));
    header[name] = {{"dtype", "F32"}, {"shape", tensor.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  uint64_t length = header_text.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  write_file(std::filesystem::path(dir) / "model.safetensors", file + header_text + data);
  return fixture;
}

}  // namespace conformance
}  // namespace enginery
