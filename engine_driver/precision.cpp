#include "engine_driver/precision.h"

#include "host_api/error.h"

namespace enginery {

bool PrecisionType::is_half(const std::string& p) { return p == "16" || p == "fp16" || p == "float16"; }
bool PrecisionType::is_float(const std::string& p) { return p == "32" || p == "fp32" || p == "float32"; }
bool PrecisionType::is_bfloat16(const std::string& p) { return p == "bf16" || p == "bfloat16"; }

c10::ScalarType PrecisionType::to_dtype(const std::string& precision) {
  if (is_half(precision)) return c10::kHalf;
  if (is_float(precision)) return c10::kFloat;
  if (is_bfloat16(precision)) return c10::kBFloat16;
  throw EngineryError("unexpected precision: " + precision, "", kAllowed);
}

c10::ScalarType PrecisionType::to_dtype(int precision) {
  if (precision == 16) return c10::kHalf;
  if (precision == 32) return c10::kFloat;
  throw EngineryError("unexpected precision: " + std::to_string(precision), "", kAllowed);
}

std::string PrecisionType::to_str(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kHalf:
      return "fp16";
    case c10::kFloat:
      return "fp32";
    case c10::kBFloat16:
      return "bf16";
    default:
      throw EngineryError(std::string("unexpected precision: ") + c10::toString(dtype), "",
                          "Half, Float, BFloat16");
  }
}

}  // namespace enginery
