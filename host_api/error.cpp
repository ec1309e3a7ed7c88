#include "host_api/error.h"

namespace enginery {
namespace {
std::string format_message(const std::string& what, const std::string& where, const std::string& allowed) {
  std::string message = where.empty() ? what : where + ": " + what;
  if (!allowed.empty()) message += " (allowed: " + allowed + ")";
  return message;
}
}  // namespace

EngineryError::EngineryError(std::string what, std::string where, std::string allowed)
    : std::runtime_error(format_message(what, where, allowed)),
      what_(std::move(what)),
      where_(std::move(where)),
      allowed_(std::move(allowed)) {}

EngineryError::~EngineryError() = default;

}  // namespace enginery
