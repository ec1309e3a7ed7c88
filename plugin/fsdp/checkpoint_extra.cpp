#include "plugin/fsdp/checkpoint_extra.h"

#include <ATen/Context.h>

#include "host_api/error.h"

namespace enginery {
namespace fsdp {
namespace ckpt {
namespace {

std::string to_hex(const torch::Tensor& bytes) {
  static const char* kDigits = "0123456789abcdef";
  auto b = bytes.contiguous().to(torch::kCPU);
  const auto* p = b.data_ptr<uint8_t>();
  std::string out;
  out.reserve(static_cast<size_t>(b.numel()) * 2);
  for (int64_t i = 0; i < b.numel(); ++i) out += kDigits[p[i] >> 4], out += kDigits[p[i] & 0xf];
  return out;
}

torch::Tensor from_hex(const std::string& hex, const std::string& where) {
  if (hex.size() % 2 != 0) throw EngineryError("odd-length RNG state", where);
  auto out = torch::empty({static_cast<int64_t>(hex.size() / 2)}, torch::kUInt8);
  auto* p = out.data_ptr<uint8_t>();
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw EngineryError("RNG state is not hex", where);
  };
  for (size_t i = 0; i < hex.size() / 2; ++i) p[i] = static_cast<uint8_t>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  return out;
}

}  // namespace

nlohmann::json capture_rng(const torch::Device& device) {
  nlohmann::json j;
  {
    auto gen = at::globalContext().defaultGenerator(torch::kCPU);
    std::lock_guard<std::mutex> lock(gen.mutex());
    j["cpu"] = to_hex(gen.get_state());
  }
  if (device.is_cuda()) {
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    j["cuda"] = to_hex(gen.get_state());
  }
  return j;
}

void restore_rng(const nlohmann::json& states, const torch::Device& device, const std::string& where) {
  if (states.contains("cpu")) {
    auto gen = at::globalContext().defaultGenerator(torch::kCPU);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(from_hex(states.at("cpu").get<std::string>(), where));
  }
  if (device.is_cuda() && states.contains("cuda")) {
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(from_hex(states.at("cuda").get<std::string>(), where));
  }
}

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
