// Peak memory and time of the language-model head: per-token log-probs + entropy through the full [tokens x vocab]
// fp32 logits versus the chunked head (models/lm_head.h), forward and backward. Each variant runs in its own
// process so its peak resident set (VmHWM) is its own.
//   bench_logprob_memory [--tokens N] [--vocab V] [--hidden H] [--chunk ROWS]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <torch/torch.h>

#include "models/lm_head.h"

namespace {

// kB of the named line of /proc/self/status (VmRSS, VmHWM).
int64_t status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  }
  return -1;
}

struct Sizes {
  int64_t tokens = 4096, vocab = 32768, hidden = 256, chunk = 0;
};

int run_child(const std::string& mode, const Sizes& s) {
  torch::manual_seed(0);
  at::set_num_threads(1);
  auto hidden = torch::randn({s.tokens, s.hidden}).requires_grad_(true);
  auto weight = (torch::randn({s.vocab, s.hidden}) * 0.05).requires_grad_(true);
  auto targets = torch::randint(0, s.vocab, {s.tokens}, torch::kLong);
  const int64_t before_kb = status_kb("VmRSS");
  auto t0 = std::chrono::steady_clock::now();
  using enginery::models::TokenLogProbs;
  TokenLogProbs r = mode == "full"
                        ? enginery::models::full_log_probs(hidden, weight, targets, true, torch::kFloat)
                        : enginery::models::chunked_log_probs(hidden, weight, targets, true, torch::kFloat, s.chunk);
  (r.log_probs.sum() + r.entropy.sum()).backward();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int64_t peak_kb = status_kb("VmHWM");
  std::printf("%s %.1f %.1f %.6f %.6f\n", mode.c_str(), (peak_kb - before_kb) / 1024.0, ms,
              r.log_probs.sum().item<double>(), hidden.grad().abs().sum().item<double>());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Sizes s;
  std::string child;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tokens") s.tokens = std::stoll(v);
    else if (k == "--vocab") s.vocab = std::stoll(v);
    else if (k == "--hidden") s.hidden = std::stoll(v);
    else if (k == "--chunk") s.chunk = std::stoll(v);
    else if (k == "--child") child = v;
    else {
      std::cerr << "unknown option " << k << " (allowed: --tokens --vocab --hidden --chunk)\n";
      return 2;
    }
  }
  if (!child.empty()) return run_child(child, s);
  const double logits_mb = s.tokens * s.vocab * 4.0 / (1 << 20);
  const int64_t chunk = s.chunk > 0 ? s.chunk : enginery::models::default_chunk_rows(s.vocab);
  std::printf("tokens=%lld vocab=%lld hidden=%lld chunk_rows=%lld; one fp32 logits matrix = %.0f MiB\n",
              (long long)s.tokens, (long long)s.vocab, (long long)s.hidden, (long long)chunk, logits_mb);
  std::printf("| head | peak RSS over inputs (MiB) | fwd+bwd (ms) | sum log p | sum |d hidden| |\n|---|---|---|---|---|\n");
  for (const char* mode : {"full", "chunked"}) {
    std::ostringstream cmd;
    cmd << "'" << argv[0] << "' --child " << mode << " --tokens " << s.tokens << " --vocab " << s.vocab << " --hidden "
        << s.hidden << " --chunk " << chunk;
    FILE* p = popen(cmd.str().c_str(), "r");
    if (!p) return 1;
    char name[32];
    double mb, ms, lp, gh;
    const int n = std::fscanf(p, "%31s %lf %lf %lf %lf", name, &mb, &ms, &lp, &gh);
    const int rc = pclose(p);
    if (n != 5 || rc != 0) {
      std::fprintf(stderr, "%s run failed (rc %d)\n", mode, rc);
      return 1;
    }
    std::printf("| %s | %.0f | %.0f | %.4f | %.4f |\n", name, mb, ms, lp, gh);
  }
  return 0;
}
