#include "registry/manifest.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>

#include <toml++/toml.h>

#include "host_api/error.h"
#include "host_api/version.h"
#include "support/input_files.h"
#include "support/toml_guard.h"

namespace enginery {
namespace {

const char* const kTopLevelKeys = "name, version, api_version, library, sha256, engines";
const char* const kEngineKeys = "model_type, backend, device";
const char* const kMigration = "rebuild the plugin against enginery's contract 3 and render its manifest again "
                               "(docs/PLUGIN_GUIDE.md, \"Migrating from 2.x\")";
constexpr uint64_t kMaxManifestBytes = 1 << 20;

std::string where_of(const std::filesystem::path& file, const toml::source_region& region) {
  if (region.begin.line == 0) return file.string();
  return file.string() + ":" + std::to_string(region.begin.line) + ":" + std::to_string(region.begin.column);
}

const char* type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "nothing";
  }
}

bool is_identifier(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-' || c == '.';
  });
}

// Reads the fields of one TOML table, remembering where the table starts for "missing field" errors.
class TableReader {
 public:
  TableReader(const toml::table& table, const std::filesystem::path& file, std::string table_where,
              std::string context)
      : table_(table), file_(file), table_where_(std::move(table_where)), context_(std::move(context)) {}

  void reject_unknown_keys(const std::set<std::string>& allowed, const char* allowed_text) const {
    for (auto&& [key, value] : table_) {
      if (!allowed.count(std::string(key.str()))) {
        throw EngineryError("unknown key '" + std::string(key.str()) + "'" + context_, where_of(file_, key.source()),
                            allowed_text);
      }
    }
  }

  const toml::node* find(const char* key, bool required) const {
    const toml::node* node = table_.get(key);
    if (!node && required) throw EngineryError("missing required field '" + std::string(key) + "'" + context_, table_where_);
    return node;
  }

  std::string where(const toml::node& node) const { return where_of(file_, node.source()); }

  [[noreturn]] void wrong_type(const char* key, const toml::node& node, const char* expected) const {
    throw EngineryError("field '" + std::string(key) + "' must be " + expected + ", got " + type_name(node.type()) +
                            context_,
                        where(node));
  }

  std::optional<std::string> string(const char* key, bool required) const {
    const toml::node* node = find(key, required);
    if (!node) return std::nullopt;
    if (!node->is_string()) wrong_type(key, *node, "a string");
    return node->as_string()->get();
  }

  std::string identifier(const char* key) const {
    std::string value = *string(key, true);
    if (!is_identifier(value)) {
      throw EngineryError("field '" + std::string(key) + "' is '" + value + "'" + context_, where(*find(key, true)),
                          "a non-empty name of letters, digits, '_', '-', '.'");
    }
    return value;
  }

  std::vector<std::string> string_array(const char* key) const {
    std::vector<std::string> out;
    const toml::node* node = find(key, false);
    if (!node) return out;
    if (!node->is_array()) wrong_type(key, *node, "an array of strings");
    for (const toml::node& element : *node->as_array()) {
      if (!element.is_string()) wrong_type(key, element, "an array of strings");
      out.push_back(element.as_string()->get());
    }
    return out;
  }

 private:
  const toml::table& table_;
  const std::filesystem::path& file_;
  std::string table_where_;
  std::string context_;
};

// "3" (a string, as plugin.toml has always written it). "2.N" is a 2.x manifest, refused with what to do.
int parse_api_version(const std::string& text, const std::string& where) {
  const bool digits = !text.empty() && text.size() < 6 &&
                      std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
  if (text.rfind("2.", 0) == 0 || text == "2") {
    throw EngineryError("api_version \"" + text + "\" is a 2.x plugin; this host implements contract " +
                            std::to_string(kContractVersion) + ": " + kMigration,
                        where, "\"" + std::to_string(kContractVersion) + "\"");
  }
  if (!digits) {
    throw EngineryError("field 'api_version' is '" + text + "'", where,
                        "\"" + std::to_string(kContractVersion) + "\", the contract version");
  }
  return std::stoi(text);
}

void check_library_path(const std::string& library, const std::string& where) {
  if (library.empty()) {
    throw EngineryError("field 'library' is empty", where, "the plugin library's file name, relative to the manifest");
  }
  std::filesystem::path path(library);
  bool escapes = library.empty() || path.is_absolute() || path.has_root_name();
  for (const auto& part : path) escapes = escapes || part == "..";
  if (escapes) {
    throw EngineryError("field 'library' is '" + library + "', which is outside the manifest's directory", where,
                        "a relative path inside the plugin directory, without '..'");
  }
}

std::string normalise_sha256(const std::string& text, const std::string& where) {
  std::string value;
  for (unsigned char c : text) value.push_back(static_cast<char>(std::tolower(c)));
  bool hex = value.size() == 64 && std::all_of(value.begin(), value.end(), [](unsigned char c) {
               return std::isdigit(c) || (c >= 'a' && c <= 'f');
             });
  if (!hex) throw EngineryError("field 'sha256' is '" + value + "'", where, "64 hexadecimal digits");
  return value;
}

// The manifest's bytes, read only when it is a regular file: a FIFO named plugin.toml would otherwise block the
// host forever, and a device would never end.
std::string read_manifest_file(const std::filesystem::path& file) {
  return input::read_regular(file.string(), kMaxManifestBytes, "cannot read plugin manifest");
}

}  // namespace

PluginManifest parse_manifest_text(std::string_view text, const std::filesystem::path& file) {
  check_toml_text(text, file.string());
  toml::table root;
  try {
    root = toml::parse(text, file.string());
  } catch (const toml::parse_error& e) {
    throw EngineryError("malformed TOML: " + std::string(e.description()), where_of(file, e.source()));
  }

  PluginManifest manifest;
  manifest.file = file;
  TableReader top(root, file, file.string() + ":1:1", "");
  // The version first: a 2.x manifest gets the migration message, not "unknown key" for what 2.x had.
  const toml::node* api = top.find("api_version", true);
  if (!api->is_string()) top.wrong_type("api_version", *api, "a string");
  manifest.api_version_where = top.where(*api);
  manifest.api_version = parse_api_version(api->as_string()->get(), manifest.api_version_where);
  for (const char* key : {"manifest_version", "capabilities"}) {
    if (const toml::node* old = top.find(key, false)) {
      throw EngineryError(std::string("'") + key + "' is a 2.x field (engines declare their capabilities at " +
                              "registration now): " + kMigration,
                          top.where(*old), kTopLevelKeys);
    }
  }
  top.reject_unknown_keys({"name", "version", "api_version", "library", "sha256", "engines"}, kTopLevelKeys);
  manifest.name = top.identifier("name");
  manifest.version = *top.string("version", true);

  manifest.library = *top.string("library", true);
  manifest.library_where = top.where(*top.find("library", true));
  check_library_path(manifest.library, manifest.library_where);

  if (auto sha = top.string("sha256", false)) {
    manifest.sha256_where = top.where(*top.find("sha256", false));
    manifest.sha256 = normalise_sha256(*sha, manifest.sha256_where);
  }
  const toml::node* engines = top.find("engines", true);
  const toml::array* engine_array = engines->as_array();
  if (engine_array && engine_array->empty()) {
    throw EngineryError("field 'engines' declares no engine", top.where(*engines), "at least one [[engines]] table");
  }
  if (!engine_array || !engine_array->is_array_of_tables()) {
    top.wrong_type("engines", *engines, "an array of tables ([[engines]])");
  }
  std::set<EngineKey> seen;
  for (size_t i = 0; i < engine_array->size(); ++i) {
    const toml::table& table = *engine_array->get(i)->as_table();
    ManifestEngine engine;
    engine.where = where_of(file, table.source());
    TableReader reader(table, file, engine.where, " in [[engines]] #" + std::to_string(i + 1));
    if (const toml::node* old = reader.find("capabilities", false)) {
      throw EngineryError("'capabilities' is a 2.x field (engines declare their capabilities at registration " +
                              std::string("now): ") + kMigration,
                          reader.where(*old), kEngineKeys);
    }
    reader.reject_unknown_keys({"model_type", "backend", "device"}, kEngineKeys);
    engine.key = {reader.identifier("model_type"), reader.identifier("backend"), reader.identifier("device")};
    if (!seen.insert(engine.key).second) {
      throw EngineryError("engine " + engine.key.str() + " is declared twice", engine.where);
    }
    manifest.engines.push_back(std::move(engine));
  }
  return manifest;
}

PluginManifest parse_manifest(const std::filesystem::path& file) {
  return parse_manifest_text(read_manifest_file(file), file);
}

}  // namespace enginery
