#pragma once
// The one list of every key of TrainConfig (config/schema.cpp). A ConfigVisitor walks it: the parser reads each
// key from TOML, the printer writes it back, so the two can never disagree about a key's name or type.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/train_config.h"

namespace enginery {

class ConfigVisitor {
 public:
  virtual ~ConfigVisitor() = default;
  // `key` is the full dotted key ("engine.mixed_precision.param_dtype").
  virtual void field(const std::string& key, int64_t& value) = 0;
  virtual void field(const std::string& key, double& value) = 0;
  virtual void field(const std::string& key, bool& value) = 0;
  virtual void field(const std::string& key, std::string& value) = 0;
  virtual void field(const std::string& key, std::vector<std::string>& value) = 0;
  virtual void field(const std::string& key, std::optional<double>& value) = 0;
  virtual void field(const std::string& key, std::optional<std::string>& value) = 0;
  virtual void field(const std::string& key, double (&value)[2]) = 0;
  // A string from a closed set.
  virtual void choice(const std::string& key, std::string& value, const std::vector<std::string>& allowed) = 0;
  // A precision (verl PrecisionType spellings: a string or the integers 16 / 32), typed at the boundary.
  virtual void precision(const std::string& key, c10::ScalarType& value) = 0;
  virtual void optional_precision(const std::string& key, std::optional<c10::ScalarType>& value) = 0;
  virtual void scaler_mode(const std::string& key, ScalerMode& value) = 0;
  // Whether the table `key` is given (parser) / should be written (printer).
  virtual bool has_table(const std::string& key) = 0;
  // [<parent>.<backend>]: options of the selected backend, kept as strings; every other sub-table of `parent`
  // that is not a known one is an error.
  virtual void backend_table(const std::string& parent, const std::string& backend,
                             std::map<std::string, ScalarValue>& options) = 0;
};

void visit_config(ConfigVisitor& visitor, TrainConfig& config);

// Why nothing reads `key` under `config` (its algorithm, loss and data decide), with what to do instead; an empty
// `reason` when the key is read (config/unread_keys.cpp). The parser refuses such a key when it is set, the
// printer leaves it out, so no knob is accepted and then ignored (docs/ARCHITECTURE.md, "Configuration").
struct UnreadKey {
  std::string reason;
  std::string allowed;
};
UnreadKey why_not_read(const TrainConfig& config, const std::string& key);

}  // namespace enginery
