// Writes the resolved TrainConfig as TOML (printed at the start of a run and saved beside its outputs).
#include <toml++/toml.h>

#include <sstream>

#include "config/schema.h"
#include "engine_driver/precision.h"

namespace enginery {
namespace {

class TomlWriter : public ConfigVisitor {
 public:
  TomlWriter(toml::table& root, const TrainConfig& config) : root_(root), config_(config) {}

  void field(const std::string& key, int64_t& value) override { put(key, value); }
  void field(const std::string& key, double& value) override { put(key, value); }
  void field(const std::string& key, bool& value) override { put(key, value); }
  void field(const std::string& key, std::string& value) override { put(key, value); }
  void field(const std::string& key, std::vector<std::string>& value) override {
    toml::array array;
    for (const auto& item : value) array.push_back(item);
    put(key, std::move(array));
  }
  void field(const std::string& key, std::optional<double>& value) override {
    if (value) put(key, *value);  // TOML has no null: an unset optional is left out
  }
  void field(const std::string& key, std::optional<std::string>& value) override {
    if (value) put(key, *value);
  }
  void field(const std::string& key, double (&value)[2]) override { put(key, toml::array{value[0], value[1]}); }
  void choice(const std::string& key, std::string& value, const std::vector<std::string>&) override {
    put(key, value);
  }
  void precision(const std::string& key, c10::ScalarType& value) override {
    put(key, PrecisionType::to_str(value));
  }
  void optional_precision(const std::string& key, std::optional<c10::ScalarType>& value) override {
    if (value) put(key, PrecisionType::to_str(*value));
  }
  void scaler_mode(const std::string& key, ScalerMode& value) override { put(key, std::string(to_string(value))); }
  bool has_table(const std::string&) override { return true; }
  void backend_table(const std::string& parent, const std::string& backend,
                     std::map<std::string, ScalarValue>& options) override {
    for (const auto& [name, value] : options) {
      std::visit([&](const auto& v) { put(parent + "." + backend + "." + name, v); }, value);
    }
  }

 private:
  // A key the run does not read is left out: the parser would refuse it (config/schema.h, why_not_read).
  template <typename T>
  void put(const std::string& key, T&& value) {
    if (!why_not_read(config_, key).reason.empty()) return;
    toml::table* table = &root_;
    std::stringstream ss(key);
    std::vector<std::string> parts;
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (table->get(parts[i]) == nullptr) table->insert(parts[i], toml::table{});
      table = table->get(parts[i])->as_table();
    }
    table->insert_or_assign(parts.back(), std::forward<T>(value));
  }

  toml::table& root_;
  const TrainConfig& config_;
};

}  // namespace

std::string to_toml(const TrainConfig& config) {
  toml::table root;
  TomlWriter writer(root, config);
  TrainConfig copy = config;
  visit_config(writer, copy);
  std::ostringstream out;
  out << "# enginery train: resolved configuration (source: " << config.source << ")\n" << root << "\n";
  return out.str();
}

}  // namespace enginery
