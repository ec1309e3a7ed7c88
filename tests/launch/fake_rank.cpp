// A stand-in rank for the launch tests. Arguments: fail_rank=<r> exit=<code> stubborn delay_ms=<ms> connect.
// With `connect` each rank first connects to MASTER_ADDR:MASTER_PORT and exits with 4 if nothing accepts.
// Rank fail_rank prints two lines and exits with `exit` after delay_ms; the others print a line and sleep (ignoring
// SIGTERM when `stubborn`), so only the launcher can end them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

// Whether something accepts a connection at MASTER_ADDR (an IPv4 address):MASTER_PORT right now.
bool rendezvous_accepts() {
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr == nullptr || port == nullptr) return false;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  if (inet_pton(AF_INET, addr, &to.sin_addr) != 1) return false;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const bool accepted = fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
  if (fd >= 0) close(fd);
  return accepted;
}

int main(int argc, char** argv) {
  int fail_rank = -1, code = 3, delay_ms = 200;
  bool stubborn = false, connect_first = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("fail_rank=", 0) == 0) fail_rank = std::atoi(a.c_str() + 10);
    if (a.rfind("exit=", 0) == 0) code = std::atoi(a.c_str() + 5);
    if (a.rfind("delay_ms=", 0) == 0) delay_ms = std::atoi(a.c_str() + 9);
    if (a == "stubborn") stubborn = true;
    if (a == "connect") connect_first = true;
  }
  const char* rank_env = std::getenv("RANK");
  const int rank = rank_env ? std::atoi(rank_env) : -1;
  std::printf("hello from rank %d of %s port %s\n", rank, std::getenv("WORLD_SIZE"), std::getenv("MASTER_PORT"));
  std::fflush(stdout);
  if (connect_first) {
    const bool accepted = rendezvous_accepts();
    std::printf("rendezvous port %s\n", accepted ? "accepts" : "refuses");
    if (!accepted) return 4;
  }
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
