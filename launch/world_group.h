#pragma once
// The world every rank joins before it builds an engine (docs/ARCHITECTURE.md, "Launching ranks"): after the
// rendezvous (rendezvous.h), the process group over all ranks that the host hands to the engine as
// EngineArgs::world_group.
#include <chrono>
#include <cstdint>
#include <string>

#include "support/torch_compat.h"
#include "launch/rank_env.h"

namespace enginery {

// A FileStore: ranks of one host meeting through a file none of them has used before.
c10::intrusive_ptr<c10d::Store> make_file_store(const std::string& path, int64_t world_size);

// The group over all ranks: NCCL for device "cuda", Gloo otherwise. A build without that backend throws.
// `timeout` bounds every collective on the group (trainer.collective_timeout_s; zero: the backend's default).
c10::intrusive_ptr<compat::CommGroup> make_world_group(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                                       int64_t world_size, const std::string& device,
                                                       std::chrono::milliseconds timeout = {});

// trainer.collective_timeout_s as c10d's milliseconds (at least 1).
std::chrono::milliseconds collective_timeout(double seconds);

// A timeout for messages: "600 s", "0.5 s".
std::string seconds_text(std::chrono::milliseconds timeout);

// "world group: 2 ranks over Gloo; a collective waits at most 600 s for the other ranks
// (trainer.collective_timeout_s)": said once at the start, so a stopped peer's silence has a known end.
std::string collective_wait_line(int64_t world_size, const std::string& device, std::chrono::milliseconds timeout,
                                 const std::string& setting);

// Whether this build has the backend make_world_group picks for `device`.
bool has_world_group(const std::string& device);

// "NCCL" or "Gloo": the backend make_world_group picks for `device`, for messages.
const char* world_group_backend(const std::string& device);

}  // namespace enginery
