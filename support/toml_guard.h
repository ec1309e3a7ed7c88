#pragma once
// Inputs that TOML++ 3.3 (Debian's) does not survive, found by tests/fuzz, refused before toml::parse sees them:
//  - dotted keys and table headers are handled recursively: one line such as [a.a.a.…] with some tens of
//    thousands of parts overflows the stack;
//  - a table header whose name starts with anything but a key character ("[=", "[#", "[" alone on a line) fails
//    an assertion inside the parser (abort in builds without NDEBUG, undefined behaviour with it), and so does
//    a '}' where an array expects a value ("a = [1, }") and a date followed by 'T' and no time.
// Every TOML text enginery reads (run configs, --set values, plugin manifests) goes through check_toml_text, so
// such a file is an EngineryError naming its line instead of a crash (docs/ARCHITECTURE.md, "Errors").
#include <cstddef>
#include <string>
#include <string_view>

namespace enginery {

// Far above any real key (a few parts) and far below the depth that overflows the stack. A line's '.' outside
// strings and comments bounds how deeply its keys nest; floats count too, so a line of 256 floats is refused.
constexpr size_t kMaxTomlDotsPerLine = 256;

// Throws EngineryError("<file>:<line>: ...") on a line with more than kMaxTomlDotsPerLine '.' outside strings
// and comments, on a table header that does not start with a key, on a value's mismatched brackets and on a date
// followed by 'T' without a time.
void check_toml_text(std::string_view text, const std::string& file);

}  // namespace enginery
