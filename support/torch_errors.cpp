#include "support/torch_errors.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>

namespace enginery {
namespace compat {

std::string error_message(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

std::string error_first_line(const std::exception& e) {
  const std::string text = error_message(e);
  return text.substr(0, text.find('\n'));
}

bool error_says_timeout(const std::exception& e) {
  std::string text = error_message(e);
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text.find("timed out") != std::string::npos || text.find("timeout") != std::string::npos;
}

}  // namespace compat
}  // namespace enginery
