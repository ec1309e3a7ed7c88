// enginery_fuzz: a seeded mutation loop over the parsers of untrusted input (tests/fuzz/README.md).
//   enginery_fuzz --target config --seconds 20 --seed 1 --out findings   fuzz one target for a bounded time
//   enginery_fuzz --replay tests/fuzz/regressions [--target NAME]        run every saved input once
// Exit status: 0 no finding, 1 findings (their inputs are saved under --out), 2 bad usage.
#include <cxxabi.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <typeinfo>

#include "host_api/error.h"
#include "tests/fuzz/crash_guard.h"
#include "tests/fuzz/mutator.h"
#include "tests/fuzz/targets.h"

namespace enginery {
namespace fuzz {
namespace {

namespace fs = std::filesystem;

constexpr unsigned kInputTimeoutS = 10;  // far above any input's parse time; beyond it, a hang
constexpr size_t kMaxCorpus = 512;

struct Outcome {
  std::optional<std::string> finding;  // what went wrong; empty when the parser behaved
  std::string feature;                 // the error the input ended in (without digits): a coarse novelty signal
};

std::string type_of_current_exception() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "unknown";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(type->name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? name.get() : type->name();
}

std::string without_digits(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 120)) {
    if (!std::isdigit(static_cast<unsigned char>(c))) out.push_back(c);
  }
  return out;
}

Outcome run_one(const Target& target, const std::string& input) {
  Outcome out;
  try {
    target.fuzz_one(input);
    out.feature = "accepted";
  } catch (const EngineryError& e) {
    out.feature = without_digits(e.what_failed());
  } catch (const Finding& e) {
    out.finding = std::string("broken invariant: ") + e.what();
  } catch (const std::exception& e) {
    out.finding = "escaped " + type_of_current_exception() + ": " + e.what();
  } catch (...) {
    out.finding = "escaped " + type_of_current_exception();
  }
  return out;
}

// `label` names the input in the crash message (the target, or the replayed file).
Outcome run_guarded(const Target& target, const std::string& input, const std::string& crash_path,
                    const std::string& label) {
  begin_input(input, crash_path, label, kInputTimeoutS);
  Outcome out = run_one(target, input);
  end_input();
  return out;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Built-in seeds must parse: a fuzzer that starts from rejected inputs only ever tests the first check.
std::vector<std::string> load_corpus(const Target& target, const std::string& crash_path, bool& ok) {
  std::vector<std::string> corpus = target.seeds();
  for (size_t i = 0; i < corpus.size(); ++i) {
    const Outcome outcome = run_guarded(target, corpus[i], crash_path, target.name + " seed " + std::to_string(i));
    if (outcome.finding || outcome.feature != "accepted") {
      std::cerr << "enginery_fuzz: built-in seed " << i << " of " << target.name << " is not accepted: "
                << outcome.finding.value_or(outcome.feature) << "\n";
      ok = false;
    }
  }
  for (const auto& file : files_in(source_dir() / "tests/fuzz/corpus" / target.name)) corpus.push_back(read_file(file));
  return corpus;
}

class FindingLog {
 public:
  FindingLog(fs::path dir, std::string target) : dir_(std::move(dir)), target_(std::move(target)) {}
  // Saves the first input of each distinct finding; returns whether it was new.
  bool add(const std::string& input, const std::string& what) {
    ++count_;
    if (!seen_.insert(without_digits(what)).second) return false;
    const fs::path file = dir_ / (target_ + "-finding-" + std::to_string(seen_.size()) + ".bin");
    write_file(file, input);
    std::cout << "enginery_fuzz: FINDING in " << target_ << ": " << what.substr(0, 500) << "\n  input saved to "
              << file.string() << std::endl;
    return true;
  }
  size_t distinct() const { return seen_.size(); }
  size_t count() const { return count_; }

 private:
  fs::path dir_;
  std::string target_;
  std::set<std::string> seen_;
  size_t count_ = 0;
};

int fuzz(const Target& target, double seconds, uint64_t seed, const fs::path& out, size_t max_findings) {
  fs::create_directories(out);
  const std::string crash_path = (out / (target.name + "-crash-seed" + std::to_string(seed) + ".bin")).string();
  bool seeds_ok = true;
  std::vector<std::string> corpus = load_corpus(target, crash_path, seeds_ok);
  if (corpus.empty()) throw std::runtime_error("no seeds for target " + target.name);
  Mutator mutator(seed, target.syntax);
  mutator.add_dictionary(target.dictionary);
  FindingLog findings(out, target.name);
  std::set<std::string> features;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  uint64_t iterations = 0;
  const std::string label = "target " + target.name;
  while (elapsed() < seconds && findings.distinct() < max_findings) {
    std::string input = mutator.mutate(corpus[mutator.below(corpus.size())], corpus);
    if (target.repair) target.repair(input, mutator);
    ++iterations;
    const Outcome outcome = run_guarded(target, input, crash_path, label);
    if (outcome.finding) {
      findings.add(input, *outcome.finding);
    } else if (features.insert(outcome.feature).second && corpus.size() < kMaxCorpus) {
      corpus.push_back(std::move(input));  // an error not seen before: a new path through the parser
    }
  }
  const double took = elapsed();
  std::cout << "enginery_fuzz: " << target.name << ": " << iterations << " inputs in " << took << " s ("
            << static_cast<uint64_t>(iterations / std::max(took, 1e-9)) << "/s), seed " << seed << ", corpus "
            << corpus.size() << ", " << features.size() << " distinct outcomes, " << findings.count()
            << " findings (" << findings.distinct() << " distinct)" << std::endl;
  return findings.count() > 0 || !seeds_ok ? 1 : 0;
}

// Runs every file of <dir>/<target>/ once: inputs that once crashed or escaped must now end cleanly (an
// EngineryError, or acceptance where the input was valid). Finding no input at all fails: a moved folder must not
// pass as a clean replay.
int replay(const std::vector<const Target*>& targets, const fs::path& dir, const fs::path& out) {
  fs::create_directories(out);
  size_t failures = 0, runs = 0;
  for (const Target* target : targets) {
    for (const auto& file : files_in(dir / target->name)) {
      const std::string input = read_file(file);
      const std::string crash_path = (out / (target->name + "-replay-crash.bin")).string();
      const Outcome outcome = run_guarded(*target, input, crash_path, file.string());
      ++runs;
      if (outcome.finding) {
        ++failures;
        std::cout << "enginery_fuzz: FAIL " << file.string() << ": " << outcome.finding->substr(0, 500) << "\n";
      } else {
        std::cout << "enginery_fuzz: ok   " << file.string() << " (" << outcome.feature.substr(0, 100) << ")\n";
      }
    }
  }
  std::cout << "enginery_fuzz: replayed " << runs << " inputs, " << failures << " failed" << std::endl;
  return failures > 0 || runs == 0 ? 1 : 0;
}

const Target* find_target(const std::string& name) {
  for (const Target& t : all_targets()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace
}  // namespace fuzz
}  // namespace enginery

int main(int argc, char** argv) {
  using namespace enginery::fuzz;
  CLI::App app{"enginery_fuzz: seeded mutation fuzzing of enginery's input parsers"};
  std::string target_name, out = "fuzz-findings", replay_dir;
  double seconds = 20;
  uint64_t seed = 1;
  size_t max_findings = 10;
  bool list = false;
  app.add_option("--target", target_name, "config, config_overrides, manifest, safetensors or checkpoint");
  app.add_option("--seconds", seconds, "how long to fuzz")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the mutations (the same seed replays the same inputs)");
  app.add_option("--out", out, "directory for finding and crash inputs");
  app.add_option("--max-findings", max_findings, "stop after this many distinct findings");
  app.add_option("--replay", replay_dir, "run every file of <DIR>/<target>/ once instead of fuzzing");
  app.add_flag("--list", list, "print the target names");
  CLI11_PARSE(app, argc, argv);
  if (list) {
    for (const Target& t : all_targets()) std::cout << t.name << "\n";
    return 0;
  }
  const Target* target = target_name.empty() ? nullptr : find_target(target_name);
  if (!target_name.empty() && target == nullptr) {
    std::cerr << "enginery_fuzz: unknown target '" << target_name << "' (--list names them)\n";
    return 2;
  }
  install_crash_guard();
  try {
    if (!replay_dir.empty()) {
      std::vector<const Target*> targets;
      for (const Target& t : all_targets()) {
        if (target == nullptr || target == &t) targets.push_back(&t);
      }
      return replay(targets, replay_dir, out);
    }
    if (target == nullptr) {
      std::cerr << "enginery_fuzz: --target is required to fuzz (--list names them)\n";
      return 2;
    }
    return fuzz(*target, seconds, seed, out, max_findings);
  } catch (const std::exception& e) {
    std::cerr << "enginery_fuzz: error: " << e.what() << "\n";
    return 2;
  }
}
