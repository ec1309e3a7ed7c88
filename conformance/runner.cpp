// run_suite(): discover targets from the manifests, register one GoogleTest test per (target, check) at run time
// (testing::RegisterTest, as ADBC's validation suite is instantiated per driver), run them, print the report.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "conformance/conformance.h"
#include "conformance/target.h"
#include "registry/plugin_loader.h"

namespace enginery {
namespace conformance {
namespace {

class CheckTest : public testing::Test {
 public:
  CheckTest(const Check* check, const Target* target, std::string target_skip)
      : check_(check), target_(target), target_skip_(std::move(target_skip)) {}

  void TestBody() override {
    if (!target_skip_.empty()) GTEST_SKIP() << target_skip_;
    const std::string reason = check_->skip_reason ? check_->skip_reason(*target_) : std::string();
    if (!reason.empty()) GTEST_SKIP() << reason;
    try {
      check_->body(*target_);
    } catch (const std::exception& e) {
      FAIL() << "threw: " << e.what();
    }
  }

 private:
  const Check* check_;
  const Target* target_;
  std::string target_skip_;
};

struct ReportLine {
  std::string status, suite, check, detail;
  double seconds = 0;
};

std::string first_lines(const std::string& text, size_t max_lines) {
  std::istringstream in(text);
  std::string line, out;
  for (size_t i = 0; i < max_lines && std::getline(in, line); ++i) out += (out.empty() ? "" : "\n        ") + line;
  return out;
}

class ReportListener : public testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const testing::TestInfo& info) override {
    const testing::TestResult& result = *info.result();
    ReportLine line{"PASS", info.test_suite_name(), info.name(), "", result.elapsed_time() / 1000.0};
    if (result.Skipped()) line.status = "SKIP";
    if (result.Failed()) line.status = "FAIL";
    for (int i = 0; i < result.total_part_count(); ++i) {
      const testing::TestPartResult& part = result.GetTestPartResult(i);
      if ((line.status == "SKIP" && part.skipped()) || (line.status == "FAIL" && part.failed())) {
        std::string message = part.message();
        for (const char* prefix : {"Skipped\n", "Failed\n"}) {
          if (message.rfind(prefix, 0) == 0) message = message.substr(std::string(prefix).size());
        }
        line.detail = first_lines(message, line.status == "FAIL" ? 6 : 1);
        break;
      }
    }
    if (line.status == "PASS") {
      for (int i = 0; i < result.test_property_count(); ++i) {
        const testing::TestProperty& p = result.GetTestProperty(i);
        line.detail += std::string(line.detail.empty() ? "" : ", ") + p.key() + "=" + p.value();
      }
    }
    lines.push_back(line);
  }
  std::vector<ReportLine> lines;
};

std::string gtest_filter(const std::string& check_filter) {
  std::string filter, pattern;
  std::istringstream in(check_filter.empty() ? "*" : check_filter);
  while (std::getline(in, pattern, ':')) filter += (filter.empty() ? "" : ":") + std::string("*.") + pattern;
  return filter;
}

std::string device_skip(const std::string& device) {
  if (device == "cpu") return "";
  if (device == "cuda") return torch::cuda::is_available() ? "" : "CUDA is not available on this host";
  return "the suite does not know device '" + device + "'";
}

// Plugins are never unloaded and engines keep their libraries alive: the registry lives until exit.
EngineRegistry* load_registry(const SuiteOptions& options, PluginLoadReport& load) {
  auto* registry = new EngineRegistry();
  PluginLoader loader({{std::filesystem::absolute(options.plugin_dir), "--plugin-dir", true, /*required=*/true}});
  load = loader.load(*registry);
  std::cout << "conformance: plugin dir " << options.plugin_dir.string() << "\n";
  for (const LoadedPlugin& plugin : load.loaded) {
    std::cout << "  loaded  " << plugin.manifest.name << " " << plugin.manifest.version << " ("
              << plugin.manifest.file.string() << ")\n";
  }
  for (const RejectedPlugin& plugin : load.rejected) {
    std::cout << "  REJECTED " << (plugin.name.empty() ? plugin.path.string() : plugin.name) << ": " << plugin.reason
              << "\n";
  }
  return registry;
}

// The registered engines the options select, as targets (alive until exit: the registered tests point at them).
// None selected: prints what is registered and returns an empty list.
std::vector<Target>* select_targets(const SuiteOptions& options, EngineRegistry* registry) {
  auto* targets = new std::vector<Target>();
  std::vector<std::string> registered;
  for (const EngineInfo& info : registry->list()) {
    registered.push_back(info.key.str() + " from " + info.origin.str());
    if (!options.backend.empty() && info.key.backend != options.backend) continue;
    if (!options.model_type.empty() && info.key.model_type != options.model_type) continue;
    if (!options.device.empty() && info.key.device != options.device) continue;
    Target target;
    target.key = info.key;
    target.origin = info.origin;
    target.capabilities.insert(info.capabilities.begin(), info.capabilities.end());
    target.registry = registry;
    target.plugin_dir = std::filesystem::absolute(options.plugin_dir);
    target.model_path = options.model_path;
    target.self_command = options.self_command;
    targets->push_back(std::move(target));
  }
  if (targets->empty()) {
    std::cout << "conformance: FAIL: no engine matches backend '" << options.backend << "', model_type '"
              << options.model_type << "', device '" << options.device << "'. Registered:";
    for (const std::string& line : registered) std::cout << "\n  " << line;
    if (registered.empty()) std::cout << " none";
    std::cout << std::endl;
  }
  return targets;
}

void list_checks(const std::vector<Target>& targets) {
  for (const Target& target : targets) {
    const std::string target_skip = device_skip(target.key.device);
    for (const Check& check : all_checks()) {
      std::string reason = target_skip.empty() && check.skip_reason ? check.skip_reason(target) : target_skip;
      std::cout << "  " << target.suite_name() << "." << check.name
                << (reason.empty() ? "" : "  [skipped: " + reason + "]") << "\n      " << check.what << "\n";
    }
  }
}

void register_checks(const std::vector<Target>& targets) {
  for (const Target& target : targets) {
    const std::string target_skip = device_skip(target.key.device);
    for (const Check& check : all_checks()) {
      const Check* check_ptr = &check;
      const Target* target_ptr = &target;
      testing::RegisterTest(target.suite_name().c_str(), check.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [=]() -> testing::Test* { return new CheckTest(check_ptr, target_ptr, target_skip); });
    }
  }
}

// Runs the registered tests selected by the check filter; returns GoogleTest's status and fills `report`.
int run_checks(const SuiteOptions& options, ReportListener*& report) {
  std::vector<std::string> args = {"enginery-conformance", "--gtest_filter=" + gtest_filter(options.check_filter)};
  args.insert(args.end(), options.gtest_args.begin(), options.gtest_args.end());
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  testing::InitGoogleTest(&argc, argv.data());
  report = new ReportListener();
  testing::UnitTest::GetInstance()->listeners().Append(report);  // owned by GoogleTest from here
  return RUN_ALL_TESTS();
}

// One line per check; returns the number of failed checks and counts the passed and skipped ones.
int print_report(const SuiteOptions& options, const ReportListener& report, int& passed, int& skipped) {
  int failed = 0;
  std::cout << "\nconformance report (" << options.plugin_dir.string() << ", model " << options.model_path << ")\n";
  for (const ReportLine& line : report.lines) {
    (line.status == "PASS" ? passed : line.status == "FAIL" ? failed : skipped)++;
    std::cout << "  " << line.status << "  " << std::left << std::setw(32) << line.suite << std::setw(34) << line.check
              << std::right << std::fixed << std::setprecision(1) << std::setw(6) << line.seconds << " s"
              << (line.detail.empty() ? "" : "  " + line.detail) << "\n";
  }
  std::cout << passed << " passed, " << failed << " failed, " << skipped << " skipped" << std::endl;
  return failed;
}

}  // namespace

std::vector<std::string> check_names() {
  std::vector<std::string> names;
  for (const Check& check : all_checks()) names.push_back(check.name);
  return names;
}

int run_suite(const SuiteOptions& options) {
  if (options.plugin_dir.empty()) {
    std::cerr << "conformance: --plugin-dir is required" << std::endl;
    return 2;
  }
  PluginLoadReport load;
  EngineRegistry* registry = load_registry(options, load);
  if (!load.unusable_dirs.empty()) {  // a typo'd or empty directory is an error naming it, not "no engine matches"
    std::cerr << "conformance: error: " << load.unusable_dirs.front().message << std::endl;
    return 2;
  }
  const std::vector<Target>* targets = select_targets(options, registry);
  if (targets->empty()) return 1;
  if (options.list_only) {
    list_checks(*targets);
    return 0;
  }
  register_checks(*targets);
  ReportListener* report = nullptr;
  const int gtest_status = run_checks(options, report);
  int passed = 0, skipped = 0;
  const int failed = print_report(options, *report, passed, skipped);
  if (!load.rejected.empty()) std::cout << load.rejected.size() << " plugin(s) rejected (see above)" << std::endl;
  return (gtest_status == 0 && failed == 0 && passed + skipped > 0) ? 0 : 1;
}

}  // namespace conformance
}  // namespace enginery
