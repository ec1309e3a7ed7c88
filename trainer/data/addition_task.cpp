#include "trainer/data/addition_task.h"

namespace enginery {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

AdditionTask::AdditionTask(int64_t digits, uint64_t seed) : digits_(digits), seed_(seed), modulus_(1) {
  for (int64_t i = 0; i < digits; ++i) modulus_ *= 10;
}

std::vector<int64_t> AdditionTask::tokens(uint64_t a, uint64_t b) const {
  std::vector<int64_t> out;
  out.reserve(seq_len());
  out.push_back(kBos);
  auto put_msb_first = [&](uint64_t value) {
    std::vector<int64_t> digits(digits_);
    for (int64_t i = digits_ - 1; i >= 0; --i, value /= 10) digits[i] = kDigit0 + static_cast<int64_t>(value % 10);
    out.insert(out.end(), digits.begin(), digits.end());
  };
  put_msb_first(a);
  out.push_back(kPlus);
  put_msb_first(b);
  out.push_back(kEquals);
  uint64_t sum = a + b;
  for (int64_t i = 0; i <= digits_; ++i, sum /= 10) out.push_back(kDigit0 + static_cast<int64_t>(sum % 10));
  out.push_back(kEos);
  return out;
}

std::vector<float> AdditionTask::loss_mask() const {
  std::vector<float> mask(seq_len(), 0.0f);
  for (int64_t t = answer_begin(); t < seq_len(); ++t) mask[t] = 1.0f;
  return mask;
}

bool AdditionTask::held_out(uint64_t a, uint64_t b) const {
  return mix64(mix64(seed_ ^ 0x5eedULL) ^ (a * modulus_ + b)) % 10 == 0;
}

std::pair<uint64_t, uint64_t> AdditionTask::pair_from_hash(uint64_t h) const {
  return {h % modulus_, (h / modulus_) % modulus_};
}

std::pair<uint64_t, uint64_t> AdditionTask::train_pair(int64_t index) const {
  uint64_t h = mix64(mix64(seed_) + static_cast<uint64_t>(index));
  for (;;) {
    auto pair = pair_from_hash(h);
    if (!held_out(pair.first, pair.second)) return pair;
    h = mix64(h);
  }
}

std::pair<uint64_t, uint64_t> AdditionTask::val_pair(int64_t index) const {
  uint64_t h = mix64(mix64(seed_ ^ 0xa11ULL) + static_cast<uint64_t>(index));
  for (;;) {
    auto pair = pair_from_hash(h);
    if (held_out(pair.first, pair.second)) return pair;
    h = mix64(h);
  }
}

std::string AdditionTask::render(const std::vector<int64_t>& tokens) const {
  auto digit = [&](int64_t token) -> char {
    return token >= kDigit0 && token < kDigit0 + 10 ? static_cast<char>('0' + token - kDigit0) : '?';
  };
  std::string out;
  for (int64_t t = 1; t < static_cast<int64_t>(tokens.size()) && t < answer_begin(); ++t) {
    const int64_t token = tokens[t];
    out += token == kPlus ? '+' : token == kEquals ? '=' : digit(token);
  }
  std::string sum;
  for (int64_t t = answer_begin(); t < answer_begin() + digits_ + 1 && t < static_cast<int64_t>(tokens.size()); ++t) {
    sum.insert(sum.begin(), digit(tokens[t]));
  }
  return out + sum;
}

}  // namespace enginery
