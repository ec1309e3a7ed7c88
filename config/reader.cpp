// Reads a TrainConfig from TOML (+ --set overrides) through the schema in config/schema.cpp.
#include <toml++/toml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "config/data_sources.h"
#include "config/rollout_sampling.h"
#include "config/schema.h"
#include "engine_driver/precision.h"
#include "host_api/error.h"
#include "models/generation_settings.h"
#include "models/model_args.h"
#include "support/list_text.h"
#include "support/toml_guard.h"

namespace enginery {
namespace {

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  return parts;
}

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date/time";
  }
}

// Walks the parsed document for the schema, remembering every key it knows so anything else can be reported.
class TomlReader : public ConfigVisitor {
 public:
  TomlReader(toml::table& root, std::string file, std::map<std::string, std::string> flags,
             std::map<std::string, std::string>* origins)
      : root_(root), file_(std::move(file)), flags_(std::move(flags)), origins_(origins) {}

  void field(const std::string& key, int64_t& value) override {
    if (const toml::node* n = find(key)) {
      if (!n->is_integer()) wrong_type(key, *n, "an integer");
      value = n->as_integer()->get();
    }
  }
  void field(const std::string& key, double& value) override {
    if (const toml::node* n = find(key)) value = number(key, *n);
  }
  void field(const std::string& key, bool& value) override {
    if (const toml::node* n = find(key)) {
      if (!n->is_boolean()) wrong_type(key, *n, "a boolean (true or false)");
      value = n->as_boolean()->get();
    }
  }
  void field(const std::string& key, std::string& value) override {
    if (const toml::node* n = find(key)) value = string(key, *n);
  }
  void field(const std::string& key, std::vector<std::string>& value) override {
    if (const toml::node* n = find(key)) {
      if (n->is_string()) {
        value = {n->as_string()->get()};
        return;
      }
      if (!n->is_array()) wrong_type(key, *n, "an array of strings");
      value.clear();
      for (const toml::node& item : *n->as_array()) value.push_back(string(key, item));
    }
  }
  void field(const std::string& key, std::optional<double>& value) override {
    if (const toml::node* n = find(key)) value = number(key, *n);
  }
  void field(const std::string& key, std::optional<std::string>& value) override {
    if (const toml::node* n = find(key)) value = string(key, *n);
  }
  void field(const std::string& key, double (&value)[2]) override {
    if (const toml::node* n = find(key)) {
      if (!n->is_array() || n->as_array()->size() != 2) wrong_type(key, *n, "an array of two numbers");
      value[0] = number(key, *n->as_array()->get(0));
      value[1] = number(key, *n->as_array()->get(1));
    }
  }
  void choice(const std::string& key, std::string& value, const std::vector<std::string>& allowed) override {
    const toml::node* n = find(key);
    if (n == nullptr) return;
    std::string given = string(key, *n);
    if (std::find(allowed.begin(), allowed.end(), given) == allowed.end()) {
      throw EngineryError(key + ": unknown value '" + given + "'", where(key, *n), join_list(allowed));
    }
    value = given;
  }
  void precision(const std::string& key, c10::ScalarType& value) override {
    if (const toml::node* n = find(key)) value = precision_of(key, *n);
  }
  void optional_precision(const std::string& key, std::optional<c10::ScalarType>& value) override {
    if (const toml::node* n = find(key)) value = precision_of(key, *n);
  }
  void scaler_mode(const std::string& key, ScalerMode& value) override {
    const toml::node* n = find(key);
    if (n == nullptr) return;
    const std::string given = string(key, *n);
    for (auto mode : {ScalerMode::kAuto, ScalerMode::kAlways, ScalerMode::kNever}) {
      if (given == to_string(mode)) {
        value = mode;
        return;
      }
    }
    throw EngineryError(key + ": unknown value '" + given + "'", where(key, *n), "auto, always, never");
  }
  bool has_table(const std::string& key) override {
    known_tables_.insert(key);
    const toml::node* n = lookup(key);
    // A value in place of the table is refused by reject_unknown(), which then knows every key the table takes.
    return n != nullptr && n->is_table();
  }
  void backend_table(const std::string& parent, const std::string& backend,
                     std::map<std::string, ScalarValue>& options) override {
    const std::string key = parent + "." + backend;
    check_backend_name(parent, backend, key);
    known_tables_.insert(key);
    const toml::node* n = lookup(key);
    if (n == nullptr) return;
    if (!n->is_table()) wrong_type(key, *n, "a table of backend options");
    for (const auto& [name, item] : *n->as_table()) {
      const std::string item_key = key + "." + std::string(name.str());
      known_.insert(item_key);
      // The printer writes options back as dotted keys: a '.' in the name would come back as a sub-table.
      if (name.str().empty() || name.str().find('.') != std::string_view::npos) {
        throw EngineryError("backend option name '" + std::string(name.str()) + "' is empty or has a '.'",
                            where_key(item_key, name, item), "plain names such as offload_outside_modes");
      }
      if (item.is_table() || item.is_array()) wrong_type(item_key, item, "a string, number or boolean");
      ScalarValue& value = options[std::string(name.str())];
      if (item.is_string()) {
        value = std::string(item.as_string()->get());
      } else if (item.is_boolean()) {
        value = item.as_boolean()->get();
      } else if (item.is_integer()) {
        value = static_cast<int64_t>(item.as_integer()->get());
      } else if (item.is_floating_point()) {
        value = item.as_floating_point()->get();
      } else {
        wrong_type(item_key, item, "a string, number or boolean");
      }
    }
  }

  // Everything in the document the schema did not ask for is an error.
  void reject_unknown() const { reject_unknown_in(root_, ""); }

 private:
  const toml::node* lookup(const std::string& key) const {
    const toml::node* node = &root_;
    for (const std::string& part : split_key(key)) {
      const toml::table* table = node->as_table();
      if (table == nullptr) return nullptr;
      node = table->get(part);
      if (node == nullptr) return nullptr;
    }
    return node;
  }
  // verl spells the rollout and actor keys actor_rollout_ref.rollout.* / actor_rollout_ref.actor.*; the schema's
  // short sections follow this file's style. Either spelling is read, never both for one key.
  static std::string verl_spelling(const std::string& key) {
    for (const char* section : {"actor.", "rollout."}) {
      if (key.rfind(section, 0) == 0) return "actor_rollout_ref." + key;
    }
    return "";
  }

  const toml::node* find(const std::string& key) {
    known_.insert(key);
    const toml::node* node = lookup(key);
    const std::string long_key = verl_spelling(key);
    if (!long_key.empty()) {
      known_.insert(long_key);
      if (const toml::node* long_node = lookup(long_key)) {
        // A --set of one spelling overrides the file's other spelling; two of the same kind are ambiguous.
        const bool short_flag = flags_.count(key) != 0, long_flag = flags_.count(long_key) != 0;
        if (node != nullptr && short_flag == long_flag) {
          throw EngineryError(key + " is set twice, also as " + long_key, where(long_key, *long_node),
                              "one of the two spellings");
        }
        if (node == nullptr || long_flag) {
          spelled_[key] = long_key;
          node = long_node;
        }
      }
    }
    if (node != nullptr && origins_ != nullptr) (*origins_)[key] = where(key, *node);
    return node;
  }

  std::string where(const std::string& key, const toml::node& node) const {
    auto spelled = spelled_.find(key);
    auto flag = flags_.find(spelled != spelled_.end() ? spelled->second : key);
    if (flag != flags_.end()) return flag->second;
    const auto& begin = node.source().begin;
    if (begin.line == 0) return file_;
    return file_ + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column);
  }

  // An unknown key is reported where the key is written (its value's position is further right).
  std::string where_key(const std::string& key, const toml::key& name, const toml::node& node) const {
    if (flags_.count(key) || name.source().begin.line == 0) return where(key, node);
    return file_ + ":" + std::to_string(name.source().begin.line) + ":" + std::to_string(name.source().begin.column);
  }

  // The backend's options live in [<parent>.<backend>]; an empty name would read [<parent>] itself, and the name
  // of one of the schema's own tables ([engine.grad_scaler]) would read its keys twice, as options too.
  void check_backend_name(const std::string& parent, const std::string& backend, const std::string& key) const {
    if (backend.empty() || known_.count(key) || is_known_table(key)) {
      const std::string strategy_key = parent + ".strategy";
      const toml::node* n = lookup(strategy_key);
      throw EngineryError(strategy_key + ": '" + backend + "' is not a backend name",
                          n != nullptr ? where(strategy_key, *n) : file_, "the backend of an installed plugin");
    }
  }

  [[noreturn]] void wrong_type(const std::string& key, const toml::node& node, const std::string& expected) const {
    throw EngineryError(key + ": expected " + expected + ", got " + type_name(node), where(key, node));
  }

  double number(const std::string& key, const toml::node& n) const {
    if (n.is_integer()) return static_cast<double>(n.as_integer()->get());
    if (!n.is_floating_point()) wrong_type(key, n, "a number");
    return n.as_floating_point()->get();
  }
  std::string string(const std::string& key, const toml::node& n) const {
    if (!n.is_string()) wrong_type(key, n, "a string");
    return n.as_string()->get();
  }
  c10::ScalarType precision_of(const std::string& key, const toml::node& n) const {
    std::string text;
    if (n.is_integer()) {
      text = std::to_string(n.as_integer()->get());
    } else if (n.is_string()) {
      text = n.as_string()->get();
    } else {
      wrong_type(key, n, "a precision string or 16 / 32");
    }
    try {
      return PrecisionType::to_dtype(text);
    } catch (const EngineryError& e) {
      throw EngineryError(key + ": " + e.what_failed(), where(key, n), PrecisionType::kAllowed);
    }
  }

  bool is_known_table(const std::string& key) const {
    if (known_tables_.count(key)) return true;
    const std::string prefix = key + ".";
    for (const auto& known : known_) {
      if (known.compare(0, prefix.size(), prefix) == 0) return true;
    }
    return false;
  }

  std::string allowed_under(const std::string& prefix) const {
    std::set<std::string> names;
    const std::string p = prefix.empty() ? "" : prefix + ".";
    auto add = [&](const std::string& key, bool table) {
      if (key.compare(0, p.size(), p) != 0) return;
      std::string rest = key.substr(p.size());
      const auto dot = rest.find('.');
      if (dot != std::string::npos) {
        names.insert("[" + p + rest.substr(0, dot) + "]");
      } else {
        names.insert(table ? "[" + p + rest + "]" : rest);
      }
    };
    for (const auto& key : known_) add(key, false);
    for (const auto& key : known_tables_) add(key, true);
    std::vector<std::string> list(names.begin(), names.end());
    return join_list(list);
  }

  void reject_unknown_in(const toml::table& table, const std::string& prefix) const {
    for (const auto& [name, node] : table) {
      const std::string key = prefix.empty() ? std::string(name.str()) : prefix + "." + std::string(name.str());
      if (known_.count(key)) continue;
      if (is_known_table(key)) {
        if (node.is_table()) {
          reject_unknown_in(*node.as_table(), key);
          continue;
        }
        throw EngineryError("'" + key + "' is a section, not a key: set one of its keys, as " + key +
                                ".<key>=<value> (--set) or <key> = <value> under [" + key + "]",
                            where_key(key, name, node), "<key> one of " + allowed_under(key));
      }
      std::string what = node.is_table() ? "unknown table [" + key + "]" : "unknown key '" + key + "'";
      if (node.is_table() && prefix == "engine") {
        what += " (backend options are read only from the table of engine.strategy)";
      }
      throw EngineryError(what, where_key(key, name, node), allowed_under(prefix));
    }
  }

  toml::table& root_;
  std::string file_;
  std::map<std::string, std::string> flags_;  // key -> "--set key=value" for overridden keys
  std::set<std::string> known_;
  std::set<std::string> known_tables_;
  std::map<std::string, std::string>* origins_;
  std::map<std::string, std::string> spelled_;  // schema key -> the verl spelling it was read from
};

// Puts `value` at dotted `key` of the document, making its tables on the way; `flag` is where errors point and what
// later errors about the key name.
void set_value(toml::table& root, const std::string& key, const toml::node& value,
               std::map<std::string, std::string>& flags, const std::string& flag) {
  std::vector<std::string> parts = split_key(key);
  for (const auto& part : parts) {
    if (part.empty()) throw EngineryError("empty key component in '" + key + "'", flag);
  }
  // Each part becomes a nested table; see support/toml_guard.h for what depth does to TOML++.
  if (parts.size() > kMaxTomlDotsPerLine) {
    throw EngineryError("key has " + std::to_string(parts.size()) + " parts", flag,
                        "at most " + std::to_string(kMaxTomlDotsPerLine));
  }
  toml::table* table = &root;
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + parts[i];
    toml::node* next = table->get(parts[i]);
    if (next == nullptr) {
      table->insert(parts[i], toml::table{});
      next = table->get(parts[i]);
    }
    if (!next->is_table()) throw EngineryError("'" + walked + "' is not a table", flag);
    table = next->as_table();
  }
  table->insert_or_assign(parts.back(), value);
  flags[key] = flag;
}

// Applies one "a.b.c=value" override to the document; `flag_prefix` + text is where errors point ("--set ").
void apply_override(toml::table& root, const std::string& text, std::map<std::string, std::string>& flags,
                    const std::string& flag_prefix) {
  const std::string flag = flag_prefix + text;
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw EngineryError("expected key=value", flag, "dotted keys such as trainer.total_training_steps=100");
  }
  const std::string value_text = text.substr(eq + 1);
  // The value in TOML syntax (numbers, booleans, quoted strings, arrays); anything else is a bare string, so
  // `--set data.train_files=train.jsonl` needs no quotes.
  // Text that TOML++ would crash on (support/toml_guard.h) is not TOML here either: a plain string too.
  const std::string document = "v = " + value_text;
  toml::table parsed;
  try {
    check_toml_text(document, flag);
    parsed = toml::parse(document, flag);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value_text}};
  } catch (const EngineryError&) {
    parsed = toml::table{{"v", value_text}};
  }
  set_value(root, text.substr(0, eq), *parsed.get("v"), flags, flag);
}

// A typed value as the document's node: held in a one-entry table, whose "v" set_value copies.
toml::table as_node(const ConfigValue& value) {
  toml::table holder;
  if (const auto* list = std::get_if<ConfigList>(&value)) {
    toml::array array;
    for (const auto& item : *list) std::visit([&](const auto& x) { array.push_back(x); }, item);
    holder.insert_or_assign("v", std::move(array));
  } else {
    std::visit([&](const auto& x) { holder.insert_or_assign("v", x); }, std::get<ScalarValue>(value));
  }
  return holder;
}

// A collective timeout must be a real duration: below 0.1 s every collective would fail, and c10d counts it in
// milliseconds (int64), so absurd values are refused rather than overflowed.
constexpr double kMinCollectiveTimeoutS = 0.1;
constexpr double kMaxCollectiveTimeoutS = 1e6;

void check_positive(const TrainConfig& c, int64_t value, const std::string& key) {
  if (value <= 0) throw EngineryError(key + " must be positive, got " + std::to_string(value), c.where(key), "> 0");
}

// A real number within [lo, hi] (hi excluded when `hi_open`); NaN and infinities are never in range.
void check_range(const TrainConfig& c, double value, const std::string& key, double lo, double hi, bool hi_open,
                 const std::string& allowed) {
  const bool in_range = std::isfinite(value) && value >= lo && (hi_open ? value < hi : value <= hi);
  if (!in_range) {
    std::ostringstream text;
    text << key << " = " << value << " is out of range";
    throw EngineryError(text.str(), c.where(key), allowed);
  }
}

// Without trainer.default_local_dir the run's folder is runs/<experiment_name>: a name with a '/' or one that is
// "." or ".." would put it elsewhere (outside runs/ with "../../x").
void check_experiment_name(const TrainConfig& c) {
  const std::string& name = c.trainer.experiment_name;
  if (!c.trainer.default_local_dir.empty()) return;
  if (name.find('/') == std::string::npos && name != "." && name != "..") return;
  throw EngineryError("trainer.experiment_name = \"" + name + "\" is not a folder name: the run's folder would be runs/" +
                          name + ", not a folder directly in runs/",
                      c.where("trainer.experiment_name"),
                      "a name without '/', other than . and ..; trainer.default_local_dir names any other place");
}

// Values no optimizer or scaler can run with: refused before any rank starts, naming the key.
void check_optimizer_values(const TrainConfig& c) {
  const double inf = std::numeric_limits<double>::infinity();
  const OptimizerConfig& o = c.optim;
  check_range(c, o.lr, "optim.lr", 0.0, inf, true, ">= 0, finite");
  check_range(c, o.weight_decay, "optim.weight_decay", 0.0, inf, true, ">= 0, finite");
  check_range(c, o.betas[0], "optim.betas", 0.0, 1.0, true, "two numbers in [0, 1)");
  check_range(c, o.betas[1], "optim.betas", 0.0, 1.0, true, "two numbers in [0, 1)");
  check_range(c, o.eps, "optim.eps", 0.0, inf, true, ">= 0, finite");
  check_range(c, o.clip_grad, "optim.clip_grad", -inf, inf, true, "a finite number (<= 0: no clipping)");
  check_range(c, o.lr_warmup_steps_ratio, "optim.lr_warmup_steps_ratio", 0.0, 1.0, false, "0..1");
  check_range(c, o.min_lr_ratio, "optim.min_lr_ratio", 0.0, 1.0, false, "0..1");
  check_range(c, o.num_cycles, "optim.num_cycles", 0.0, inf, true, ">= 0, finite");
  const GradScalerConfig& g = c.engine.grad_scaler;
  check_range(c, g.init_scale, "engine.grad_scaler.init_scale", std::numeric_limits<double>::min(), inf, true,
              "> 0, finite");
  check_range(c, g.growth_factor, "engine.grad_scaler.growth_factor", 1.0, inf, true, ">= 1, finite");
  check_range(c, g.backoff_factor, "engine.grad_scaler.backoff_factor", 0.0, 1.0, false, "0..1");
  check_positive(c, g.growth_interval, "engine.grad_scaler.growth_interval");
}

// GRPO's knobs (trainer/grpo/): their values are checked whether or not they are read (a key set under another
// algorithm is refused as unread before this, config/schema.h).
void check_rl_values(const TrainConfig& c) {
  const double inf = std::numeric_limits<double>::infinity();
  check_positive(c, c.rollout.n, "rollout.n");
  // The sampling values through the check `enginery generate` makes (models/generation_settings.h); the lengths
  // and rollout.dtype against the model and device follow in preflight (trainer/preflight.h).
  models::check_sampling_values(rollout_sampling_params(c), rollout_setting_names(c));
  check_positive(c, c.actor.ppo_mini_batch_size, "actor.ppo_mini_batch_size");
  check_positive(c, c.actor.ppo_epochs, "actor.ppo_epochs");
  check_range(c, c.actor.clip_ratio, "actor.clip_ratio", 0.0, 1.0, true, "[0, 1)");
  if (c.actor.clip_ratio_low) {
    check_range(c, *c.actor.clip_ratio_low, "actor.clip_ratio_low", 0.0, 1.0, true, "[0, 1)");
  }
  if (c.actor.clip_ratio_high) {
    check_range(c, *c.actor.clip_ratio_high, "actor.clip_ratio_high", 0.0, inf, true, ">= 0, finite");
  }
  // verl's dual clip requires a bound above 1: at or below it, the bound would clip unclipped tokens too.
  check_range(c, c.actor.clip_ratio_c, "actor.clip_ratio_c", std::nextafter(1.0, 2.0), inf, true, "> 1, finite");
  check_range(c, c.actor.kl_loss_coef, "actor.kl_loss_coef", 0.0, inf, true, ">= 0, finite");
  check_range(c, c.actor.entropy_coeff, "actor.entropy_coeff", -inf, inf, true, "a finite number");
  if (!c.is_grpo()) return;
  if (!is_builtin_addition(c.data.train_files)) {
    throw EngineryError("algorithm.adv_estimator = grpo needs a task with a rule-based reward; data.train_files = " +
                            c.data.train_files + " has none",
                        c.where("data.train_files"), "builtin:addition");
  }
  if (c.data.train_batch_size % c.actor.ppo_mini_batch_size != 0) {
    throw EngineryError("data.train_batch_size = " + std::to_string(c.data.train_batch_size) +
                            " prompts do not split into mini-batches of actor.ppo_mini_batch_size = " +
                            std::to_string(c.actor.ppo_mini_batch_size),
                        c.where("actor.ppo_mini_batch_size"), "a divisor of data.train_batch_size");
  }
  if (c.loss.type != "sft") {
    throw EngineryError("loss.type = " + c.loss.type + " is an offline objective; algorithm.adv_estimator = grpo " +
                            "trains the policy loss of actor.*",
                        c.where("loss.type"), "sft (the default: loss.* is not read under grpo)");
  }
}

// Checks that involve several keys or value ranges.
void check_values(const TrainConfig& c) {
  check_rl_values(c);
  check_positive(c, c.data.train_batch_size, "data.train_batch_size");
  check_positive(c, c.engine.micro_batch_size_per_gpu, "engine.micro_batch_size_per_gpu");
  check_positive(c, c.engine.max_token_len_per_gpu, "engine.max_token_len_per_gpu");
  check_positive(c, c.data.max_length, "data.max_length");
  check_positive(c, c.trainer.log_freq, "trainer.log_freq");
  check_positive(c, c.trainer.total_epochs, "trainer.total_epochs");
  check_range(c, c.trainer.collective_timeout_s, "trainer.collective_timeout_s", kMinCollectiveTimeoutS,
              kMaxCollectiveTimeoutS, false, "seconds, 0.1..1e6 (default 600)");
  check_range(c, c.trainer.rendezvous_timeout_s, "trainer.rendezvous_timeout_s", kMinCollectiveTimeoutS,
              kMaxCollectiveTimeoutS, false, "seconds, 0.1..1e6 (default 300)");
  if (c.trainer.total_training_steps < 0) {
    throw EngineryError("trainer.total_training_steps must be >= 0", c.where("trainer.total_training_steps"), "0 (from total_epochs) or a step count");
  }
  if (c.data.digits < 1 || c.data.digits > 9) {
    throw EngineryError("data.digits must be within 1..9, got " + std::to_string(c.data.digits), c.where("data.digits"));
  }
  // An evaluation of nothing would report "0/0" every test_freq steps; verl refuses an empty validation set up front.
  if (c.trainer.test_freq > 0 && c.data.val_size < 1 && why_not_read(c, "data.val_size").reason.empty()) {
    throw EngineryError("data.val_size = " + std::to_string(c.data.val_size) +
                            " leaves no held-out example for the evaluation every trainer.test_freq = " +
                            std::to_string(c.trainer.test_freq) + " steps",
                        c.where("data.val_size"), "data.val_size >= 1, or trainer.test_freq = -1 (no evaluation)");
  }
  if (c.trainer.experiment_name.empty()) throw EngineryError("trainer.experiment_name is empty", c.where("trainer.experiment_name"));
  check_experiment_name(c);
  check_optimizer_values(c);
  const ModelSource source = c.model.source();
  if (source.is_builtin()) {
    try {
      models::builtin_args(source.name);
    } catch (const EngineryError&) {
      throw EngineryError("model.path: unknown built-in model '" + c.model.path + "'", c.where("model.path"),
                          "an HF model directory, or builtin:<name> with <name> one of " + models::builtin_names());
    }
  }
}

// A key the run's algorithm, loss or data does not read is refused where it was set (config/schema.h).
void reject_unread(const TrainConfig& c) {
  for (const auto& [key, where] : c.origins) {
    const UnreadKey unread = why_not_read(c, key);
    if (!unread.reason.empty()) throw EngineryError(key + " " + unread.reason, where, unread.allowed);
  }
}

// The schema's walk over `root` and every check; `flags` hold where each key set by an override or a value was set
// (errors point there), `source` names the document.
TrainConfig read_document(toml::table& root, const std::string& source, std::map<std::string, std::string> flags) {
  TrainConfig config;
  config.source = source;
  TomlReader reader(root, source, flags, &config.origins);
  visit_config(reader, config);
  reader.reject_unknown();
  reject_unread(config);
  check_values(config);
  return config;
}

// The overrides applied to `root`, then read_document.
TrainConfig parse_document(toml::table& root, const std::string& source, const std::vector<std::string>& overrides,
                           const std::string& flag_prefix) {
  std::map<std::string, std::string> flags;
  for (const auto& override_text : overrides) apply_override(root, override_text, flags, flag_prefix);
  return read_document(root, source, std::move(flags));
}

}  // namespace

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  // Only a regular file: a directory would read as empty, and opening a FIFO blocks forever.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw EngineryError(std::filesystem::exists(path, ec) ? "not a regular file" : "no such file", path,
                        "a TOML config file");
  }
  std::ifstream in(path);
  if (!in) throw EngineryError("cannot open config file", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  check_toml_text(text, path);
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    const auto& begin = e.source().begin;
    throw EngineryError(std::string(e.description()),
                        path + ":" + std::to_string(begin.line) + ":" + std::to_string(begin.column));
  }
  // An empty file (or one of comments only) would start a full default run nobody asked for.
  if (root.empty()) throw EngineryError("the config file sets no key", path, "a TOML file with at least one table");
  return parse_document(root, path, overrides, "--set ");
}

TrainConfig train_config_from_overrides(const std::vector<std::string>& overrides, const std::string& source) {
  toml::table root;
  return parse_document(root, source, overrides, source + " ");
}

TrainConfig train_config_from_values(const std::vector<std::pair<std::string, ConfigValue>>& values,
                                     const std::string& source) {
  toml::table root;
  std::map<std::string, std::string> flags;
  for (const auto& [key, value] : values) set_value(root, key, *as_node(value).get("v"), flags, source + " " + key);
  return read_document(root, source, std::move(flags));
}

}  // namespace enginery
