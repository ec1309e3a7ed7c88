#include "trainer/data/token_file.h"

#include <nlohmann/json.hpp>

#include <fstream>

#include "host_api/error.h"
#include "trainer/data/dataset.h"

namespace enginery {

std::vector<std::vector<int64_t>> read_token_lists(const std::string& path, int64_t vocab, int64_t max_positions) {
  const char* allowed = "a JSON list of lists of integer token ids";
  require_regular_file(path, allowed);
  std::ifstream in(path);
  if (!in) throw EngineryError("cannot open the token file", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw EngineryError(std::string("not valid JSON: ") + e.what(), path);
  }
  if (!j.is_array()) throw EngineryError("expected a list of token-id lists", path, allowed);
  std::vector<std::vector<int64_t>> tokens;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& row = j[i];
    if (!row.is_array()) throw EngineryError("entry is not a list", path + ": [" + std::to_string(i) + "]", allowed);
    std::vector<int64_t> seq;
    for (size_t k = 0; k < row.size(); ++k) {
      const std::string where = path + ": [" + std::to_string(i) + "][" + std::to_string(k) + "]";
      if (!row[k].is_number_integer()) throw EngineryError("token id is not an integer", where, allowed);
      const int64_t id = row[k].get<int64_t>();
      if (id < 0 || id >= vocab) {
        throw EngineryError("token id " + std::to_string(id) + " is outside the vocabulary", where,
                            "0 .. " + std::to_string(vocab - 1));
      }
      seq.push_back(id);
    }
    if (max_positions > 0 && static_cast<int64_t>(seq.size()) > max_positions) {
      throw EngineryError("a sequence of " + std::to_string(seq.size()) +
                              " tokens is longer than the model's max_position_embeddings = " +
                              std::to_string(max_positions),
                          path + ": [" + std::to_string(i) + "]");
    }
    tokens.push_back(std::move(seq));
  }
  return tokens;
}

}  // namespace enginery
