#pragma once
// Helpers shared by the models tests.
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include "models/causal_lm.h"
#include "models/model_factory.h"
#include "support/torch_compat.h"  // compat::remove_all

namespace enginery {
namespace models {
namespace testing {

// A built-in model ("qwen2-tiny", "llama-tiny", "qwen3-tiny") as the CausalLM it is.
inline std::shared_ptr<CausalLM> builtin(const std::string& name, const std::string& type = "language_model",
                                         bool checkpointing = false) {
  ModelConfig cfg;
  cfg.path = "builtin:" + name;
  cfg.enable_gradient_checkpointing = checkpointing;
  return std::dynamic_pointer_cast<CausalLM>(build_model(cfg, type));
}

inline std::string data_dir(const std::string& name) { return std::string(ENGINERY_MODELS_TEST_DATA) + "/" + name; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("enginery_models_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    enginery::compat::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// Sequences as a packed input (host_api/batch.h's [Note: packed batch]): input_ids [N], cu_seqlens [S + 1].
inline ModelInputs packed_input(const std::vector<std::vector<int64_t>>& sequences) {
  std::vector<int64_t> ids, cu{0};
  for (const auto& s : sequences) {
    ids.insert(ids.end(), s.begin(), s.end());
    cu.push_back(static_cast<int64_t>(ids.size()));
  }
  ModelInputs in;
  in.input_ids = torch::tensor(ids, torch::kLong).reshape({static_cast<int64_t>(ids.size())});
  in.cu_seqlens = torch::tensor(cu, torch::kLong);
  return in;
}

// Largest absolute elementwise difference, computed in float64.
inline double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// The output of the last decoder layer, as the training forward hands it to the head unit's hooks.
class LastLayerCapture : public UnitHooks {
 public:
  explicit LastLayerCapture(size_t last) : last_(last) {}
  void pre_forward(size_t) override {}
  void post_forward(size_t unit, const std::vector<torch::Tensor>& outputs) override {
    if (unit == last_) hidden = outputs[0];
  }
  torch::Tensor hidden;

 private:
  size_t last_;
};

// Logits [B, V] at the last position of ids/mask [B, S], through the training forward (no cache).
inline torch::Tensor full_forward_logits(CausalLM& model, const torch::Tensor& ids, const torch::Tensor& mask) {
  torch::NoGradGuard no_grad;
  LastLayerCapture capture(model.args().num_hidden_layers);
  model.forward({ids, mask, torch::Tensor()}, HeadOptions{}, &capture);
  auto h = model.body()->norm(capture.hidden.select(1, ids.size(1) - 1));
  return model.next_token_logits(h);
}

}  // namespace testing
}  // namespace models
}  // namespace enginery
