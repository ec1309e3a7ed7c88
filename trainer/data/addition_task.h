#pragma once
// The built-in synthetic task: multi-digit addition as a token sequence
//   <bos> a_1..a_d + b_1..b_d = s_0..s_d <eos>
// with zero-padded operands (most significant digit first) and the sum written least-significant digit first,
// as a person adds with carries, so each answer digit depends only on digits already seen. The loss mask covers the
// sum digits and <eos>. About a tenth of all (a, b) pairs, chosen by a hash of the seed, never appear in training;
// evaluation draws only from them, so accuracy measures generalisation, not memory.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace enginery {

class AdditionTask {
 public:
  static constexpr int64_t kPad = 0;
  static constexpr int64_t kBos = 1;
  static constexpr int64_t kEos = 2;
  static constexpr int64_t kPlus = 3;
  static constexpr int64_t kEquals = 4;
  static constexpr int64_t kDigit0 = 5;
  static constexpr int64_t kVocabSize = 15;

  AdditionTask(int64_t digits, uint64_t seed);

  int64_t digits() const { return digits_; }
  int64_t seq_len() const { return 3 * digits_ + 5; }
  int64_t answer_begin() const { return 2 * digits_ + 3; }  // first target position
  int64_t answer_len() const { return digits_ + 2; }        // sum digits + <eos>

  std::vector<int64_t> tokens(uint64_t a, uint64_t b) const;
  std::vector<float> loss_mask() const;  // 1 on the answer positions
  bool held_out(uint64_t a, uint64_t b) const;

  // Operands of training example `index` (never a held-out pair) and of held-out example `index`.
  std::pair<uint64_t, uint64_t> train_pair(int64_t index) const;
  std::pair<uint64_t, uint64_t> val_pair(int64_t index) const;

  // "123+456=579" (the sum printed most significant digit first) from a token sequence; tokens it cannot read
  // show as '?'.
  std::string render(const std::vector<int64_t>& tokens) const;

 private:
  std::pair<uint64_t, uint64_t> pair_from_hash(uint64_t h) const;

  int64_t digits_;
  uint64_t seed_;
  uint64_t modulus_;  // 10^digits
};

// splitmix64: a fixed, portable mixing function, so data order never depends on the standard library.
uint64_t mix64(uint64_t x);

}  // namespace enginery
