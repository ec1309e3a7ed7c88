#include "trainer/grpo/progress.h"

#include <cstdio>

#include "trainer/loop/metrics_log.h"

namespace enginery {
namespace grpo {

std::string format_progress(int64_t step, int64_t total, const std::map<std::string, double>& m, double eta_s) {
  auto get = [&](const char* name) {
    auto it = m.find(name);
    return it != m.end() ? it->second : 0.0;
  };
  const int width = static_cast<int>(std::to_string(total).size());
  char kl[48] = "";
  if (m.count("actor/kl_loss")) std::snprintf(kl, sizeof(kl), " | kl %.4f", get("actor/kl_loss"));
  char buffer[320];
  std::snprintf(buffer, sizeof(buffer),
                "step %*lld/%lld | score %.3f | resp_len %.1f | entropy %.3f%s | clipfrac %.3f | grad_norm %.3f | "
                "gen %.2fs update %.2fs | ETA %s",
                width, static_cast<long long>(step), static_cast<long long>(total), get("critic/score/mean"),
                get("response_length/mean"), get("actor/entropy"), kl, get("actor/pg_clipfrac"),
                get("actor/grad_norm"), get("timing_s/gen"), get("timing_s/update_actor"),
                format_duration(eta_s).c_str());
  return buffer;
}

}  // namespace grpo
}  // namespace enginery
