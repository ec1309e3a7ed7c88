#pragma once
// What rank 0 shows and records: the progress line, metrics.jsonl (one JSON object per step, plus evaluation
// lines), and the final summary table.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace enginery {

// <dir>/metrics.jsonl, appended one line per write. Every write is checked: a full disk or a file size limit fails
// the run with the file named, never a line silently cut short. An existing file is never truncated in place.
class MetricsLog {
 public:
  // With resume_step >= 0 it keeps only lines of steps <= resume_step (a crashed run may have written steps past
  // its last checkpoint), rewritten by an atomic replace; else the file must not exist yet (run_dir.h refused or
  // moved aside a used directory) and it starts empty.
  MetricsLog(const std::string& dir, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& line);
  // fsync: what was written survives a crash of the machine (at checkpoints and at the end of the run).
  void sync();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// "45s", "3m07s", "1h02m".
std::string format_duration(double seconds);

struct StepLine {
  int64_t step = 0;
  int64_t total = 0;
  double loss = 0.0;
  double grad_norm = 0.0;
  double lr = 0.0;
  double tokens_per_s = 0.0;
  double eta_s = 0.0;
};
// "step   40/300 | loss 1.2345 | grad_norm 0.812 | lr 1.00e-03 | 5.1k tok/s | ETA 1m02s"
std::string format_step(const StepLine& line);

struct RunSummary {
  int64_t steps = 0;
  double first_loss = 0.0;
  double last_loss = 0.0;
  bool has_accuracy = false;
  double first_accuracy = 0.0;
  double last_accuracy = 0.0;
  double best_accuracy = 0.0;
  bool has_val_loss = false;
  double last_val_loss = 0.0;
  double wall_s = 0.0;
  double tokens_per_s = 0.0;
  int64_t checkpoints = 0;
  std::string output_dir;
};
std::string format_summary(const RunSummary& summary);

}  // namespace enginery
