#pragma once
// What a user reads of an exception LibTorch threw: c10::Error's what() carries a C++ backtrace, and c10d's store
// and group errors say "timeout" or "timed out" in varying forms. Shared by the launcher, the rendezvous and the
// trainer's collective guard, which each turn such an error into one that names the setting to change.
#include <exception>
#include <string>

namespace enginery {
namespace compat {

// The message without LibTorch's backtrace.
std::string error_message(const std::exception& e);
// Its first line only.
std::string error_first_line(const std::exception& e);
// Whether the message says a wait ran out ("timeout", "timed out", any case).
bool error_says_timeout(const std::exception& e);

}  // namespace compat
}  // namespace enginery
