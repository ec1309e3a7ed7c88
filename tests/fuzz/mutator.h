#pragma once
// The mutation engine of enginery_fuzz: a seeded, dependency-free stand-in for libFuzzer's mutators, so the fuzz
// targets build with the normal GCC toolchain of CI. Without coverage feedback, the mutations lean on what the
// inputs are (TOML or JSON text, possibly after a binary prefix): numbers and strings are swapped for values at
// the edges of their types, values at a key are replaced, and long repeats probe nesting and length limits.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace enginery {
namespace fuzz {

enum class Syntax { kToml, kJson };

class Mutator {
 public:
  Mutator(uint64_t seed, Syntax syntax, size_t max_size = 512 * 1024);

  // Extra tokens worth inserting (key names, punctuation) besides the built-in ones of `syntax`.
  void add_dictionary(const std::vector<std::string>& tokens);
  // One to a few stacked mutations of `input`; `corpus` supplies the other side of splices.
  std::string mutate(const std::string& input, const std::vector<std::string>& corpus);
  std::mt19937_64& rng() { return rng_; }
  size_t below(size_t n);  // uniform in [0, n); 0 when n == 0

 private:
  void mutate_once(std::string& data, const std::vector<std::string>& corpus);
  void flip_bit(std::string& data);
  void insert_bytes(std::string& data);
  void erase_bytes(std::string& data);
  void replace_byte(std::string& data);
  void duplicate_chunk(std::string& data);
  void splice(std::string& data, const std::vector<std::string>& corpus);
  void insert_token(std::string& data);
  void replace_number(std::string& data);
  void replace_string(std::string& data);
  void replace_value(std::string& data);
  void insert_repeat(std::string& data);
  std::string nested_value();
  const std::string& pick(const std::vector<std::string>& items);

  std::mt19937_64 rng_;
  Syntax syntax_;
  size_t max_size_;
  std::vector<std::string> dictionary_;
};

// The [begin, end) ranges of numeric tokens (optional sign, digits, fraction, exponent) and of the contents of
// double-quoted strings in `data`; exposed for the mutator's own checks.
std::vector<std::pair<size_t, size_t>> number_tokens(const std::string& data);
std::vector<std::pair<size_t, size_t>> string_tokens(const std::string& data);

}  // namespace fuzz
}  // namespace enginery
