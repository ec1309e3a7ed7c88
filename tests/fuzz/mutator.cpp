#include "tests/fuzz/mutator.h"

#include <algorithm>
#include <cctype>

namespace enginery {
namespace fuzz {
namespace {

// Numbers at the edges of what parsers convert them to: int32/int64/uint64 limits and one past them, a value
// whose product with a dtype size wraps uint64 (2^62 + 1), float extremes, and spellings some parsers accept.
const std::vector<std::string>& interesting_numbers() {
  static const std::vector<std::string> values = {
      "0", "-0", "1", "-1", "2", "16", "32", "00", "1.5", "-1.5", "0.0", "2147483647", "2147483648", "-2147483649",
      "4294967296", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "18446744073709551615",
      "18446744073709551616", "4611686018427387905", "1e308", "-1e308", "1e309", "5e-324", "nan", "inf", "-inf",
      "NaN", "1_000", "0x7fffffffffffffff", "0b1", "1e", std::string(400, '9'), "-" + std::string(400, '9'),
      "0." + std::string(400, '0') + "1"};
  return values;
}

// String contents that probe paths (traversal, absolute), emptiness, length, escapes and invalid UTF-8.
const std::vector<std::string>& interesting_strings() {
  static const std::vector<std::string> values = {
      "", "../x", "/abs", "..", ".", "a/../../x", "C:\\\\x", std::string(5000, 'a'), "\\u0000", "\\\"", "\xff\xfe",
      "\xc3", "%s%n", "builtin:", "builtin:qwen2-tiny", "fsdp", "F32", "BF16", "I64", "model", "optimizer",
      "enginery-fsdp-checkpoint", "__metadata__", "\\ud800"};
  return values;
}

const std::vector<std::string>& json_values() {
  static const std::vector<std::string> values = {
      "0", "-1", "1.5", "1e308", "18446744073709551615", "-9223372036854775808", "4611686018427387905", "\"\"",
      "\"x\"", "\"../x\"", "\"/abs\"", "null", "true", "false", "[]", "{}", "[[]]", "[-2,-2]", "[0,-5]",
      "[0,18446744073709551615]", "[4611686018427387905]", "[4294967296,4294967296]", "[1,2,3]", "[0,0]",
      "{\"a\":1}", "[\"x\"]", "[[0,\"param\",0,1,0]]", "[[0,\"param\",-1,0,0]]", "[[9,\"param\",0,1,0]]",
      "[[0,\"param\",0,1,18446744073709551615]]", "[{}]", "[null]", "\"F32\"", "\"F16\"", "\"BF16\""};
  return values;
}

const std::vector<std::string>& toml_values() {
  static const std::vector<std::string> values = {
      "0", "-1", "1.5", "nan", "inf", "-inf", "9223372036854775807", "-9223372036854775808", "true", "\"\"",
      "\"x\"", "\"../x\"", "\"/abs\"", "''", "[]", "{}", "[[]]", "[1, 2]", "[\"a\", 1]", "{a = 1}", "1979-05-27",
      "07:32:00", "1979-05-27T07:32:00Z", "\"\"\"\nx\n\"\"\"", "'''x'''", "[0.9, 0.999, 1]", "16", "32", "\"bf16\"",
      "\"fp8\""};
  return values;
}

const std::vector<std::string>& syntax_tokens(Syntax syntax) {
  static const std::vector<std::string> toml = {"[", "]", "[[", "]]", "=", ".", "\"", "'", "'''", "\"\"\"", "\n", "#",
                                                "{", "}", ",", "\\", "\\u", "\r\n", " = ", "\t", std::string(1, '\0')};
  static const std::vector<std::string> json = {"[", "]", "{", "}", ":", ",", "\"", "\\", "\\u", "null", "true", "-",
                                                "e", ".", "\"a\":", std::string(1, '\0'), "\xef\xbb\xbf", "/*", "//"};
  return syntax == Syntax::kToml ? toml : json;
}

const std::vector<std::string>& repeat_patterns(Syntax syntax) {
  static const std::vector<std::string> toml = {"a.", "[", "{a=", "\"a\".", "9", "[a]\n", "[[a]]\n", "x=1\n"};
  static const std::vector<std::string> json = {"[", "{\"a\":", "[[", "\"a\",", "9", "{}", "[0,\"param\",0,1,0],"};
  return syntax == Syntax::kToml ? toml : json;
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// End of the JSON value starting at `pos` (a string, a bracketed value, or a bare token).
size_t json_value_end(const std::string& data, size_t pos) {
  if (pos >= data.size()) return pos;
  if (data[pos] == '"') {
    for (size_t i = pos + 1; i < data.size(); ++i) {
      if (data[i] == '\\') ++i;
      else if (data[i] == '"') return i + 1;
    }
    return data.size();
  }
  if (data[pos] == '[' || data[pos] == '{') {
    int depth = 0;
    bool in_string = false;
    for (size_t i = pos; i < data.size(); ++i) {
      const char c = data[i];
      if (in_string) {
        if (c == '\\') ++i;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if ((c == ']' || c == '}') && --depth == 0) {
        return i + 1;
      }
    }
    return data.size();
  }
  size_t end = pos;
  while (end < data.size() && std::string(",}] \n\r\t").find(data[end]) == std::string::npos) ++end;
  return end;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> number_tokens(const std::string& data) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t i = 0;
  while (i < data.size()) {
    const bool sign = (data[i] == '-' || data[i] == '+') && i + 1 < data.size() &&
                      std::isdigit(static_cast<unsigned char>(data[i + 1]));
    const bool starts = sign || std::isdigit(static_cast<unsigned char>(data[i]));
    if (!starts || (i > 0 && is_word_char(data[i - 1]))) {
      ++i;
      continue;
    }
    size_t end = i + (sign ? 1 : 0);
    auto in_number = [&](size_t k) {
      const char c = data[k];
      const bool exponent_sign = (c == '-' || c == '+') && (data[k - 1] == 'e' || data[k - 1] == 'E');
      return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '_' ||
             exponent_sign;
    };
    while (end < data.size() && in_number(end)) ++end;
    out.emplace_back(i, end);
    i = end;
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> string_tokens(const std::string& data) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != '"') continue;
    size_t end = i + 1;
    while (end < data.size() && data[end] != '"' && data[end] != '\n') {
      if (data[end] == '\\') ++end;
      ++end;
    }
    if (end >= data.size()) break;
    if (data[end] != '"') {  // unterminated on this line
      i = end;
      continue;
    }
    out.emplace_back(i + 1, end);
    i = end;
  }
  return out;
}

Mutator::Mutator(uint64_t seed, Syntax syntax, size_t max_size) : rng_(seed), syntax_(syntax), max_size_(max_size) {
  dictionary_ = syntax_tokens(syntax);
}

void Mutator::add_dictionary(const std::vector<std::string>& tokens) {
  dictionary_.insert(dictionary_.end(), tokens.begin(), tokens.end());
}

size_t Mutator::below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

const std::string& Mutator::pick(const std::vector<std::string>& items) { return items[below(items.size())]; }

std::string Mutator::mutate(const std::string& input, const std::vector<std::string>& corpus) {
  std::string data = input;
  const size_t rounds = 1 + below(4);
  for (size_t i = 0; i < rounds; ++i) {
    mutate_once(data, corpus);
    if (data.size() > max_size_) data.resize(max_size_);
  }
  return data;
}

void Mutator::mutate_once(std::string& data, const std::vector<std::string>& corpus) {
  // Text-aware mutations are weighted up: random bytes mostly stop a TOML or JSON parser at once.
  switch (below(40)) {
    case 0: case 1: case 2: flip_bit(data); break;
    case 3: case 4: case 5: insert_bytes(data); break;
    case 6: case 7: case 8: erase_bytes(data); break;
    case 9: case 10: replace_byte(data); break;
    case 11: case 12: case 13: duplicate_chunk(data); break;
    case 14: case 15: case 16: splice(data, corpus); break;
    case 17: case 18: case 19: case 20: insert_token(data); break;
    case 21: case 22: case 23: case 24: case 25: replace_number(data); break;
    case 26: case 27: case 28: case 29: replace_string(data); break;
    case 39: insert_repeat(data); break;
    default: replace_value(data); break;
  }
}

void Mutator::flip_bit(std::string& data) {
  if (data.empty()) return;
  data[below(data.size())] ^= static_cast<char>(1u << below(8));
}

void Mutator::insert_bytes(std::string& data) {
  const size_t count = 1 + below(8);
  std::string bytes;
  for (size_t i = 0; i < count; ++i) bytes.push_back(static_cast<char>(below(256)));
  data.insert(below(data.size() + 1), bytes);
}

void Mutator::erase_bytes(std::string& data) {
  if (data.empty()) return;
  const size_t pos = below(data.size());
  data.erase(pos, 1 + below(std::min<size_t>(data.size() - pos, 64)));
}

void Mutator::replace_byte(std::string& data) {
  if (data.empty()) return;
  static const char kSpecial[] = "\0\xff\x7f\x80\"'[]{}.=,:\\\n#-+";
  static const std::string special(kSpecial, sizeof(kSpecial) - 1);
  data[below(data.size())] = below(2) ? static_cast<char>(below(256)) : special[below(special.size())];
}

void Mutator::duplicate_chunk(std::string& data) {
  if (data.empty()) return;
  const size_t pos = below(data.size());
  const std::string chunk = data.substr(pos, 1 + below(std::min<size_t>(data.size() - pos, 256)));
  data.insert(below(data.size() + 1), chunk);
}

void Mutator::splice(std::string& data, const std::vector<std::string>& corpus) {
  if (corpus.empty()) return;
  const std::string& other = pick(corpus);
  if (below(2)) {
    // Head of this input, tail of the other: two valid documents often give a valid but unusual one.
    data = data.substr(0, below(data.size() + 1)) + other.substr(below(other.size() + 1));
  } else if (!other.empty()) {
    const size_t pos = below(other.size());
    data.insert(below(data.size() + 1), other.substr(pos, 1 + below(std::min<size_t>(other.size() - pos, 512))));
  }
}

void Mutator::insert_token(std::string& data) { data.insert(below(data.size() + 1), pick(dictionary_)); }

void Mutator::replace_number(std::string& data) {
  const auto tokens = number_tokens(data);
  if (tokens.empty()) return insert_token(data);
  const auto& [begin, end] = tokens[below(tokens.size())];
  data.replace(begin, end - begin, pick(interesting_numbers()));
}

void Mutator::replace_string(std::string& data) {
  const auto tokens = string_tokens(data);
  if (tokens.empty()) return insert_token(data);
  const auto& [begin, end] = tokens[below(tokens.size())];
  data.replace(begin, end - begin, pick(interesting_strings()));
}

// Replaces the value of a random key: after `":` in JSON, after `=` up to the end of the line in TOML.
void Mutator::replace_value(std::string& data) {
  std::vector<size_t> starts;
  if (syntax_ == Syntax::kJson) {
    for (size_t i = 1; i < data.size(); ++i) {
      if (data[i] == ':' && data[i - 1] == '"') starts.push_back(i + 1);
    }
  } else {
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] == '=') starts.push_back(i + 1);
    }
  }
  if (starts.empty()) return replace_number(data);
  size_t begin = starts[below(starts.size())];
  while (begin < data.size() && (data[begin] == ' ' || data[begin] == '\t')) ++begin;
  size_t end = begin;
  if (syntax_ == Syntax::kJson) {
    end = json_value_end(data, begin);
  } else {
    end = data.find('\n', begin);
    if (end == std::string::npos) end = data.size();
  }
  data.replace(begin, end - begin,
               below(16) == 0 ? nested_value() : pick(syntax_ == Syntax::kJson ? json_values() : toml_values()));
}

// A valid value nested up to 100000 deep: recursive copies and destructors of parsed documents overflow the stack
// long before a parser's own limits (if any) are reached.
std::string Mutator::nested_value() {
  static const size_t depths[] = {10, 300, 5000, 100000};
  const bool object = syntax_ == Syntax::kJson && below(2);
  const size_t depth = std::min(depths[below(4)], max_size_ / (object ? 8 : 3));
  std::string value;
  for (size_t i = 0; i < depth; ++i) value += object ? "{\"a\":" : "[";
  value += "1";
  for (size_t i = 0; i < depth; ++i) value += object ? "}" : "]";
  return value;
}

// A pattern repeated up to a hundred thousand times: nesting depth and key length are where recursive parsers
// overflow the stack.
void Mutator::insert_repeat(std::string& data) {
  static const size_t counts[] = {16, 300, 5000, 100000};
  const std::string& pattern = pick(repeat_patterns(syntax_));
  const size_t count = std::min(counts[below(4)], max_size_ / std::max<size_t>(pattern.size(), 1));
  std::string repeated;
  repeated.reserve(pattern.size() * count);
  for (size_t i = 0; i < count; ++i) repeated += pattern;
  size_t pos = below(data.size() + 1);
  if (syntax_ == Syntax::kToml && below(2)) {
    // At a line start the repeat becomes part of a key or a table header.
    const size_t newline = data.rfind('\n', pos == 0 ? 0 : pos - 1);
    pos = (newline == std::string::npos || pos == 0) ? 0 : newline + 1;
  }
  data.insert(pos, repeated);
}

}  // namespace fuzz
}  // namespace enginery
