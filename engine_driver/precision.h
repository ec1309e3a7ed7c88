#pragma once
#include <c10/core/ScalarType.h>

#include <string>

namespace enginery {

// Mirrors verl's PrecisionType exactly (case-sensitive):
//   16 "16" fp16 float16 -> Half;  32 "32" fp32 float32 -> Float;  bf16 bfloat16 -> BFloat16.
// Anything else throws EngineryError("unexpected precision: <value>").
struct PrecisionType {
  // Every spelling above, for messages.
  static constexpr const char* kAllowed = "16, \"16\", fp16, float16, 32, \"32\", fp32, float32, bf16, bfloat16";
  static c10::ScalarType to_dtype(const std::string& precision);
  static c10::ScalarType to_dtype(int precision);
  // Half -> "fp16", Float -> "fp32", BFloat16 -> "bf16"; any other dtype throws.
  static std::string to_str(c10::ScalarType dtype);
  static bool is_half(const std::string& precision);
  static bool is_float(const std::string& precision);
  static bool is_bfloat16(const std::string& precision);
};

}  // namespace enginery
