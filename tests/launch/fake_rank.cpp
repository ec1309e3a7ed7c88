// A stand-in rank for the launch tests. Arguments: fail_rank=<r> exit=<code> stubborn delay_ms=<ms>.
// Rank fail_rank prints two lines and exits with `exit` after delay_ms; the others print a line and sleep (ignoring
// SIGTERM when `stubborn`), so only the launcher can end them.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

int main(int argc, char** argv) {
  int fail_rank = -1, code = 3, delay_ms = 200;
  bool stubborn = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("fail_rank=", 0) == 0) fail_rank = std::atoi(a.c_str() + 10);
    if (a.rfind("exit=", 0) == 0) code = std::atoi(a.c_str() + 5);
    if (a.rfind("delay_ms=", 0) == 0) delay_ms = std::atoi(a.c_str() + 9);
    if (a == "stubborn") stubborn = true;
  }
  const char* rank_env = std::getenv("RANK");
  const int rank = rank_env ? std::atoi(rank_env) : -1;
  std::printf("hello from rank %d of %s port %s\n", rank, std::getenv("WORLD_SIZE"), std::getenv("MASTER_PORT"));
  std::fflush(stdout);
  if (rank == fail_rank) {
    usleep(delay_ms * 1000);
    std::fprintf(stderr, "some warning\nfake failure on rank %d\n", rank);
    return code;
  }
  if (fail_rank < 0) return 0;
  if (stubborn) std::signal(SIGTERM, SIG_IGN);
  sleep(60);
  return 0;
}
