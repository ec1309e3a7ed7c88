#pragma once
// The world every rank joins before it builds an engine (docs/ARCHITECTURE.md, "Launching ranks"): a store for the
// rendezvous, then the process group over all ranks that the host hands to the engine as EngineArgs::world_group.
#include <chrono>
#include <cstdint>
#include <string>

#include "support/torch_compat.h"
#include "launch/rank_env.h"

namespace enginery {

// Rank 0 serves a TCPStore on env.master_addr:env.master_port, the others connect; returns once every rank has
// (waiting at most `rendezvous_timeout`). Later store operations wait at most `op_timeout` (zero: the same as
// `rendezvous_timeout`), so a rank stuck in the store fails like one stuck in a collective.
c10::intrusive_ptr<c10d::Store> make_tcp_store(const RankEnv& env,
                                               std::chrono::milliseconds rendezvous_timeout = std::chrono::minutes(5),
                                               std::chrono::milliseconds op_timeout = std::chrono::milliseconds(0));

// A FileStore: ranks of one host meeting through a file none of them has used before.
c10::intrusive_ptr<c10d::Store> make_file_store(const std::string& path, int64_t world_size);

// The group over all ranks: NCCL for device "cuda", Gloo otherwise. A build without that backend throws.
// `timeout` bounds every collective on the group (trainer.collective_timeout_s; zero: the backend's default).
c10::intrusive_ptr<compat::CommGroup> make_world_group(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                                       int64_t world_size, const std::string& device,
                                                       std::chrono::milliseconds timeout = {});

// trainer.collective_timeout_s as c10d's milliseconds (at least 1).
std::chrono::milliseconds collective_timeout(double seconds);

// Whether this build has the backend make_world_group picks for `device`.
bool has_world_group(const std::string& device);

// "NCCL" or "Gloo": the backend make_world_group picks for `device`, for messages.
const char* world_group_backend(const std::string& device);

}  // namespace enginery
