#include "launch/rendezvous.h"

#include <c10/util/Logging.h>
#include <netdb.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "host_api/error.h"
#include "launch/world_group.h"
#include "support/torch_errors.h"

namespace enginery {
namespace {

using Clock = std::chrono::steady_clock;

// c10d's TCPStore client logs every failed connect attempt, each with LibTorch's backtrace (16 frames), and the
// address lookups it retries: the rendezvous says once at the start what it waits for and once at the end why it
// failed, and holds those lines back in between. TORCH_CPP_LOG_LEVEL set is a user asking for c10d's own lines.
class QuietC10dLog {
 public:
  QuietC10dLog() : saved_(FLAGS_caffe2_log_level) {
    if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = std::max(saved_, c10::GLOG_FATAL);
  }
  void restore() const { FLAGS_caffe2_log_level = saved_; }

 private:
  const int saved_;
};

// " (MASTER_ADDR 256.1.1.1 does not resolve: Name or service not known)", or "" when it resolves: the cause c10d
// only logged, in a line held back while waiting.
std::string unresolved(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc == 0) return "";
  return " (MASTER_ADDR " + host + " does not resolve: " + ::gai_strerror(rc) + ")";
}

std::string check_in_key(int64_t rank) { return "enginery/rendezvous/rank_" + std::to_string(rank); }

// "rank 1", "ranks 1, 3": the ranks that have not checked in.
std::string missing_ranks(c10d::Store& store, int64_t world_size) {
  std::vector<int64_t> missing;
  for (int64_t r = 0; r < world_size; ++r) {
    if (!store.check({check_in_key(r)})) missing.push_back(r);
  }
  std::string text = missing.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < missing.size(); ++i) text += (i ? ", " : "") + std::to_string(missing[i]);
  return missing.empty() ? "the other ranks" : text;
}

// Rank 0 serves the store, except under our launcher, which serves it itself (local_launch.h).
bool serves_store(const RankEnv& env) { return env.rank == 0 && !env.spawned_locally; }
std::string store_server(const RankEnv& env) {
  return env.spawned_locally ? "the launcher's rendezvous store" : "rank 0's rendezvous server";
}

// Connect (or serve), check in, wait for every rank: each step bounded by what is left of options.timeout.
// Connecting: waiting for rank 0's server; checking in: connected, waiting for the other ranks.
enum Phase : int { kConnecting = 0, kCheckingIn = 1 };

c10::intrusive_ptr<c10d::Store> rendezvous(const RankEnv& env, const RendezvousOptions& options,
                                           const std::string& self, const std::string& at, std::atomic<int>& phase) {
  const auto deadline = Clock::now() + options.timeout;
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = serves_store(env);
  store_options.numWorkers = static_cast<std::size_t>(env.world_size);
  store_options.waitWorkers = false;  // the check-in below waits instead, and can say who is missing
  store_options.timeout = options.timeout;
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
  } catch (const std::exception& e) {
    if (serves_store(env)) {
      throw EngineryError(self + " could not serve the rendezvous at " + at + ": " + compat::error_first_line(e),
                          "rendezvous", "a free MASTER_PORT on this host");
    }
    throw EngineryError(self + " waited " + seconds_text(options.timeout) + " (" + options.setting + ") for " +
                            store_server(env) + " at " + at + " and could not connect: " +
                            (env.spawned_locally ? std::string("the launcher is gone")
                                                 : std::string("rank 0 has not started or is gone, or "
                                                               "MASTER_ADDR/MASTER_PORT differ between ranks")) +
                            unresolved(env.master_addr) + " (" + compat::error_first_line(e) + ")",
                        "rendezvous");
  }
  phase = kCheckingIn;
  store->set(check_in_key(env.rank), std::vector<uint8_t>{1});
  std::vector<std::string> keys;
  for (int64_t r = 0; r < env.world_size; ++r) keys.push_back(check_in_key(r));
  const auto left = std::max(std::chrono::milliseconds(1),
                             std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  try {
    store->wait(keys, left);
  } catch (const std::exception& e) {
    if (!compat::error_says_timeout(e)) {
      throw EngineryError(self + " lost the rendezvous at " + at + " while waiting for the other ranks (rank 0 "
                              "exited?): " + compat::error_first_line(e),
                          "rendezvous");
    }
    throw EngineryError(self + " waited " + seconds_text(options.timeout) + " (" + options.setting + ") for " +
                            missing_ranks(*store, env.world_size) + " to join the rendezvous at " + at +
                            ": never arrived (not started, crashed or stopped before connecting, or started with "
                            "another MASTER_ADDR/MASTER_PORT or WORLD_SIZE)",
                        "rendezvous");
  }
  store->setTimeout(options.op_timeout.count() > 0 ? options.op_timeout : options.timeout);
  return store;
}

}  // namespace

std::string rendezvous_start_line(const RankEnv& env, const RendezvousOptions& options) {
  const std::string server = serves_store(env) ? "served by this rank" : store_server(env);
  return "rank " + std::to_string(env.rank) + ": joining the rendezvous at " + env.master_addr + ":" +
         std::to_string(env.master_port) + " (" + server + "), world size " + std::to_string(env.world_size) +
         "; waiting at most " + seconds_text(options.timeout) + " (" + options.setting + ") for every rank to join";
}

c10::intrusive_ptr<c10d::Store> join_rendezvous(const RankEnv& env, const RendezvousOptions& options) {
  const std::string self = "rank " + std::to_string(env.rank);
  const std::string at = env.master_addr + ":" + std::to_string(env.master_port);
  if (options.progress != nullptr) *options.progress << rendezvous_start_line(env, options) << std::endl;
  const QuietC10dLog quiet;
  // c10d's client blocks without limit on a server that accepted the connection and never answers (a stopped or
  // hung rank 0): the rendezvous runs on a thread of its own, and this one stops waiting for it a little after its
  // own bounds (which name the cause more precisely) have had their chance. An abandoned thread stays blocked until
  // the process exits, which the caller's error brings about.
  auto done = std::make_shared<std::promise<c10::intrusive_ptr<c10d::Store>>>();
  auto phase = std::make_shared<std::atomic<int>>(kConnecting);
  std::future<c10::intrusive_ptr<c10d::Store>> result = done->get_future();
  std::thread([done, phase, env, options, self, at] {
    try {
      done->set_value(rendezvous(env, options, self, at, *phase));
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  // c10d's connect retries past its own timeout, so this bound is usually the one that names an absent server.
  const auto grace = std::min<std::chrono::milliseconds>(options.timeout, std::chrono::seconds(3));
  if (result.wait_for(options.timeout + grace) != std::future_status::ready) {
    // The abandoned thread may still log from c10d: c10d's lines stay held back until the caller's error ends the
    // process.
    const std::string waited = self + " waited " + seconds_text(options.timeout) + " (" + options.setting + ") for ";
    if (*phase == kConnecting && !serves_store(env)) {
      throw EngineryError(waited + store_server(env) + " at " + at + " and got no answer: " +
                              (env.spawned_locally
                                   ? std::string("the launcher's store accepted the connection and never replied "
                                                 "(the launcher is stopped or hung)")
                                   : std::string("nothing accepted the connection, or rank 0 accepted it and never "
                                                 "replied (rank 0 not started, gone, stopped or hung, or "
                                                 "MASTER_ADDR/MASTER_PORT differ between ranks)") +
                                         unresolved(env.master_addr)),
                          "rendezvous");
    }
    throw EngineryError(waited + "the rendezvous store at " + at + " to answer: " +
                            (serves_store(env) ? std::string("its own store server never replied")
                                               : store_server(env) + " stopped answering after this rank "
                                                 "connected (" + (env.spawned_locally ? "the launcher" : "rank 0") +
                                                 " is stopped or hung)"),
                        "rendezvous");
  }
  quiet.restore();
  return result.get();
}

}  // namespace enginery
