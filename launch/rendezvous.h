#pragma once
// The rendezvous every rank of a job goes through before its world group exists (docs/ARCHITECTURE.md, "Launching
// ranks"): rank 0 serves a TCPStore at MASTER_ADDR:MASTER_PORT (under our launcher the launcher serves it and rank
// 0 connects like the others: local_launch.h), every rank connects and checks in under its own key, and each waits
// until all have. Every wait in it is bounded, the connect to a server that accepted but never answers included
// (c10d's own client waits on such a server forever), and an expired wait names this rank, what it waited for (the
// server, or the ranks that never checked in) and the setting that bounds it. A rank says at the start what it is
// about to wait for and for how long (RendezvousOptions::progress), and c10d's own log lines (a backtrace per failed
// connect attempt) are held back while it waits, unless TORCH_CPP_LOG_LEVEL asks for them.
#include <chrono>
#include <ostream>
#include <string>

#include "support/torch_compat.h"
#include "launch/rank_env.h"

namespace enginery {

struct RendezvousOptions {
  // The whole rendezvous: connecting to rank 0's server and every rank checking in.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  // Later operations on the returned store (zero: `timeout`), so a rank stuck in the store fails like one stuck
  // in a collective.
  std::chrono::milliseconds op_timeout{0};
  // The setting that bounds `timeout`, for messages ("trainer.rendezvous_timeout_s").
  std::string setting = "the rendezvous timeout";
  // Where the one line naming the rendezvous (address:port, world size, this rank, who serves it) and the bound of
  // the wait goes before it starts; null: nowhere.
  std::ostream* progress = nullptr;
};

// "rank 1: joining the rendezvous at 10.0.0.1:29500 (rank 0's rendezvous server), world size 2; waiting at most
// 300 s (trainer.rendezvous_timeout_s) for every rank to join": what join_rendezvous writes to options.progress.
std::string rendezvous_start_line(const RankEnv& env, const RendezvousOptions& options);

// Returns the job's store once every rank of `env.world_size` has checked in; throws EngineryError otherwise
// ("rank 0 waited 3 s (trainer.rendezvous_timeout_s) for rank 1 to join the rendezvous at 127.0.0.1:29500: ...").
c10::intrusive_ptr<c10d::Store> join_rendezvous(const RankEnv& env, const RendezvousOptions& options = {});

}  // namespace enginery
