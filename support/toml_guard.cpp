#include "support/toml_guard.h"

#include <cctype>

#include "host_api/error.h"

namespace enginery {
namespace {

enum class Lexeme { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral };

// Length of the run of `quote` characters at `i`.
size_t run_of(std::string_view text, size_t i, char quote) {
  size_t n = 0;
  while (i + n < text.size() && text[i + n] == quote) ++n;
  return n;
}

size_t skip_blanks(std::string_view text, size_t i) {
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  return i;
}

// A header "[name]" / "[[name]]" at `i`: its name must start with a key character, a quote or (an error TOML++
// reports itself) ']'.
bool header_starts_with_key(std::string_view text, size_t i) {
  i = skip_blanks(text, i + 1);
  if (i < text.size() && text[i] == '[') i = skip_blanks(text, i + 1);
  if (i >= text.size()) return true;  // TOML++ reports the early end itself
  const unsigned char c = static_cast<unsigned char>(text[i]);
  return std::isalnum(c) || c == '_' || c == '-' || c == '"' || c == '\'' || c == ']';
}

// A date followed by 'T' and no time ("1979-05-27Tx07:32:00"): TOML++ takes the value for a date-time and then
// fails an assertion where the hour should start.
bool date_without_time(std::string_view text, size_t i) {
  if (i + 11 >= text.size()) return false;
  auto digit = [&](size_t k) { return std::isdigit(static_cast<unsigned char>(text[i + k])) != 0; };
  return digit(0) && digit(1) && digit(2) && digit(3) && text[i + 4] == '-' && digit(5) && digit(6) &&
         text[i + 7] == '-' && digit(8) && digit(9) && (text[i + 10] == 'T' || text[i + 10] == 't') && !digit(11);
}

// Walks TOML text just far enough to know, for every character, whether it is code, comment or string, and
// whether a line starts at the top level (outside a multi-line array value, where '[' opens a header).
class Scanner {
 public:
  Scanner(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  void run() {
    for (i_ = 0; i_ < text_.size(); ++i_) {
      const char c = text_[i_];
      if (c == '\n') {
        new_line();
        continue;
      }
      switch (state_) {
        case Lexeme::kCode: code(c); break;
        case Lexeme::kComment: break;
        case Lexeme::kBasic:
          if (c == '\\') skip_escaped();
          else if (c == '"') state_ = Lexeme::kCode;
          break;
        case Lexeme::kLiteral:
          if (c == '\'') state_ = Lexeme::kCode;
          break;
        case Lexeme::kMultiBasic:
          if (c == '\\') skip_escaped();
          else if (c == '"') close_multi('"');
          break;
        case Lexeme::kMultiLiteral:
          if (c == '\'') close_multi('\'');
          break;
      }
    }
  }

 private:
  void new_line() {
    ++line_;
    dots_ = 0;
    after_equals_ = false;
    if (state_ != Lexeme::kMultiBasic && state_ != Lexeme::kMultiLiteral) state_ = Lexeme::kCode;
    line_start_ = state_ == Lexeme::kCode;
  }

  void code(char c) {
    const bool first = line_start_ && c != ' ' && c != '\t' && c != '\r';
    if (first) line_start_ = false;
    if (first && c == '[' && open_.empty() && !header_starts_with_key(text_, i_)) {
      fail("a table header must start with a key name",
           "[name] or [[name]], the name of letters, digits, '_', '-' or quoted");
    }
    if (c == '#') {
      state_ = Lexeme::kComment;
    } else if (c == '"' || c == '\'') {
      const bool multi = run_of(text_, i_, c) >= 3;
      state_ = c == '"' ? (multi ? Lexeme::kMultiBasic : Lexeme::kBasic)
                        : (multi ? Lexeme::kMultiLiteral : Lexeme::kLiteral);
      if (multi) i_ += 2;
    } else if (c == '=' && open_.empty()) {
      after_equals_ = true;
    } else if ((c == '[' || c == '{') && (after_equals_ || !open_.empty())) {
      open_.push_back(c);
    } else if ((c == ']' || c == '}') && !open_.empty()) {
      // Never valid TOML, and "[1, }" fails an assertion in TOML++ where it expects a value.
      if ((c == ']') != (open_.back() == '[')) {
        fail(std::string("'") + c + "' closes a '" + open_.back() + "'", "balanced [ ] and { }");
      }
      open_.pop_back();
    } else if ((after_equals_ || !open_.empty()) && date_without_time(text_, i_)) {
      fail("a date followed by 'T' without a time", "dates as 1979-05-27, date-times as 1979-05-27T07:32:00");
    } else if (c == '.' && ++dots_ > kMaxTomlDotsPerLine) {
      fail("more than " + std::to_string(kMaxTomlDotsPerLine) +
               " '.' outside strings on one line (keys nested this deep overflow the TOML parser)",
           "keys of at most a few hundred dotted parts");
    }
  }

  void skip_escaped() {
    if (i_ + 1 < text_.size() && text_[i_ + 1] != '\n') ++i_;
  }

  // Up to two quotes before the closing three belong to the string: the whole run ends it.
  void close_multi(char quote) {
    const size_t run = run_of(text_, i_, quote);
    if (run >= 3) state_ = Lexeme::kCode;
    i_ += run - 1;
  }

  [[noreturn]] void fail(const std::string& what, const std::string& allowed) const {
    throw EngineryError(what, file_ + ":" + std::to_string(line_), allowed);
  }

  std::string_view text_;
  const std::string& file_;
  Lexeme state_ = Lexeme::kCode;
  size_t i_ = 0, line_ = 1, dots_ = 0;
  std::string open_;  // the '[' and '{' a value has open (a multi-line array spans lines)
  bool after_equals_ = false;
  bool line_start_ = true;
};

}  // namespace

void check_toml_text(std::string_view text, const std::string& file) { Scanner(text, file).run(); }

}  // namespace enginery
