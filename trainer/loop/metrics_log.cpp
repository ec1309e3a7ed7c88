#include "trainer/loop/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "host_api/error.h"
#include "support/durable_fs.h"

namespace enginery {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw EngineryError(what + ": " + std::strerror(err), path);
}

// The lines of an earlier attempt up to resume_step (lines cut short by a crash are dropped).
std::string kept_lines(const std::string& path, int64_t resume_step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  if (!std::filesystem::is_regular_file(path, ec)) throw EngineryError("is not a regular file", path);
  std::ifstream in(path);
  if (!in) fail("cannot read", path, errno);
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    try {
      if (nlohmann::json::parse(line).value("step", int64_t{0}) <= resume_step) kept += line + '\n';
    } catch (const std::exception&) {
      // a line cut short by a crash: dropped
    }
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& dir, int64_t resume_step)
    : path_((std::filesystem::path(dir) / "metrics.jsonl").string()) {
  int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC;
  if (resume_step >= 0) {
    // Written aside and renamed over: a kill mid-way leaves the old file whole.
    durable::replace_file(path_, kept_lines(path_, resume_step));
  } else {
    flags |= O_EXCL;  // a new run never appends to (or truncates) an earlier run's metrics
  }
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0 && errno == EEXIST) {
    throw EngineryError("already exists: a new run does not overwrite an earlier run's metrics (--resume continues "
                        "it, --fresh-run moves it aside)",
                        path_);
  }
  if (fd_ < 0) fail("cannot open for writing", path_, errno);
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const nlohmann::json& line) {
  const std::string text = line.dump() + '\n';
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", path_, n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
}

void MetricsLog::sync() {
  if (::fsync(fd_) != 0 && errno != EINVAL) fail("fsync failed", path_, errno);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buffer[32];
  if (s < 60) {
    std::snprintf(buffer, sizeof(buffer), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buffer, sizeof(buffer), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  }
  return buffer;
}

namespace {
std::string human_rate(double per_s) {
  char buffer[32];
  if (per_s >= 1e6) {
    std::snprintf(buffer, sizeof(buffer), "%.2fM", per_s / 1e6);
  } else if (per_s >= 1e3) {
    std::snprintf(buffer, sizeof(buffer), "%.1fk", per_s / 1e3);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.0f", per_s);
  }
  return buffer;
}
}  // namespace

std::string format_step(const StepLine& l) {
  const int width = static_cast<int>(std::to_string(l.total).size());
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), "step %*lld/%lld | loss %.4f | grad_norm %.3f | lr %.2e | %s tok/s | ETA %s",
                width, static_cast<long long>(l.step), static_cast<long long>(l.total), l.loss, l.grad_norm, l.lr,
                human_rate(l.tokens_per_s).c_str(), format_duration(l.eta_s).c_str());
  return buffer;
}

std::string format_summary(const RunSummary& s) {
  std::vector<std::pair<std::string, std::string>> rows;
  char buffer[128];
  rows.push_back({"steps", std::to_string(s.steps)});
  std::snprintf(buffer, sizeof(buffer), "%.4f -> %.4f", s.first_loss, s.last_loss);
  rows.push_back({"train loss (first -> last)", buffer});
  if (s.has_accuracy) {
    std::snprintf(buffer, sizeof(buffer), "%.1f%% -> %.1f%% (best %.1f%%)", 100 * s.first_accuracy,
                  100 * s.last_accuracy, 100 * s.best_accuracy);
    rows.push_back({"held-out exact match", buffer});
  }
  if (s.has_val_loss) {
    std::snprintf(buffer, sizeof(buffer), "%.4f", s.last_val_loss);
    rows.push_back({"validation loss", buffer});
  }
  rows.push_back({"wall time", format_duration(s.wall_s)});
  std::snprintf(buffer, sizeof(buffer), "%s", human_rate(s.tokens_per_s).c_str());
  rows.push_back({"throughput (tokens/s)", buffer});
  rows.push_back({"checkpoints saved", std::to_string(s.checkpoints)});
  rows.push_back({"outputs", s.output_dir});

  size_t left = 0, right = 0;
  for (const auto& [k, v] : rows) left = std::max(left, k.size()), right = std::max(right, v.size());
  const std::string rule = "+" + std::string(left + 2, '-') + "+" + std::string(right + 2, '-') + "+\n";
  std::ostringstream out;
  out << rule;
  for (const auto& [k, v] : rows) {
    out << "| " << k << std::string(left - k.size(), ' ') << " | " << v << std::string(right - v.size(), ' ')
        << " |\n";
  }
  out << rule;
  return out.str();
}

}  // namespace enginery
