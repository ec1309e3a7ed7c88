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
  if (!states.is_object()) throw EngineryError("RNG states must be a JSON object", where);
  // A state of the wrong size or kind is refused by the generator itself (c10::Error): name the file instead.
  auto restore = [&](const char* key, const torch::Device& of) {
    const auto& hex = states.at(key);
    if (!hex.is_string()) throw EngineryError(std::string("RNG state '") + key + "' must be a hex string", where);
    const torch::Tensor bytes = from_hex(hex.get<std::string>(), where);
    auto gen = at::globalContext().defaultGenerator(of);
    std::lock_guard<std::mutex> lock(gen.mutex());
    try {
      gen.set_state(bytes);
    } catch (const c10::Error& e) {
      throw EngineryError(std::string("RNG state '") + key + "' is not one this generator accepts: " +
                              e.what_without_backtrace(),
                          where);
    }
  };
  if (states.contains("cpu")) restore("cpu", torch::kCPU);
  if (device.is_cuda() && states.contains("cuda")) restore("cuda", device);
}

}  // namespace ckpt
}  // namespace fsdp
}  // namespace enginery
