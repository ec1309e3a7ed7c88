#pragma once
#include <stdexcept>
#include <string>

namespace enginery {

// The one exception type of the project: what failed, where (a file:line:col, a config field, a plugin, a rank) and,
// when there is a closed set, what is allowed. Message: "<where>: <what> (allowed: <allowed>)".
class EngineryError : public std::runtime_error {
 public:
  explicit EngineryError(std::string what, std::string where = {}, std::string allowed = {});
  ~EngineryError() override;

  const std::string& what_failed() const { return what_; }
  const std::string& where() const { return where_; }
  const std::string& allowed() const { return allowed_; }

 private:
  std::string what_;
  std::string where_;
  std::string allowed_;
};

}  // namespace enginery
