// `enginery conformance --plugin-dir D [--backend B]`: runs the per-plugin conformance suite (conformance/) in
// this process; the suite is linked into the executable (library enginery_conformance, GoogleTest included).
// Exit status 0 only when every selected check passed (or was skipped for a capability the manifest lacks).
#include <string>

#include "conformance/conformance.h"
#include "conformance/rank_worker.h"
#include "launch/spawn.h"
#include "trainer/command.h"
#include "support/list_text.h"

namespace enginery {
namespace {

const CommandRegistration kConformance(
    "conformance", "Run the engine conformance suite against the plugins of a directory",
    [](CLI::App& sub) -> std::function<int()> {
      auto options = std::make_shared<conformance::SuiteOptions>();
      auto worker_spec = std::make_shared<std::string>();
      sub.add_option("--plugin-dir", options->plugin_dir, "directory of plugin.toml (or of one folder per plugin)");
      sub.add_option("--backend", options->backend, "only this backend (default: every one found)");
      sub.add_option("--model-type", options->model_type, "only language_model or value_model");
      sub.add_option("--device", options->device, "only cpu or cuda");
      sub.add_option("--model", options->model_path, "model.path handed to the engines")->capture_default_str();
      sub.add_option("--check", options->check_filter,
                     "glob(s) over check names, ':'-separated; checks: " + join_list(conformance::check_names()))
          ->capture_default_str();
      sub.add_flag("--list", options->list_only, "list the checks and why each would be skipped; run nothing");
      // Hidden: how the multi-rank check starts this executable as one rank.
      sub.add_option(conformance::kRankWorkerFlag, *worker_spec)->group("");
      return [options, worker_spec]() {
        if (!worker_spec->empty()) return conformance::run_rank_worker(*worker_spec);
        options->self_command = {self_executable(), "conformance"};
        return conformance::run_suite(*options);
      };
    });

}  // namespace
}  // namespace enginery
