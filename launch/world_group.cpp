#include "launch/world_group.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>

namespace enginery {

c10::intrusive_ptr<c10d::Store> make_file_store(const std::string& path, int64_t world_size) {
  return c10::make_intrusive<c10d::FileStore>(path, static_cast<int>(world_size));
}

c10::intrusive_ptr<compat::CommGroup> make_world_group(const c10::intrusive_ptr<c10d::Store>& store, int64_t rank,
                                                       int64_t world_size, const std::string& device,
                                                       std::chrono::milliseconds timeout) {
  const int r = static_cast<int>(rank);
  const int n = static_cast<int>(world_size);
  return device == "cuda" ? compat::make_nccl_group(store, r, n, timeout)
                          : compat::make_gloo_group(store, r, n, timeout);
}

std::chrono::milliseconds collective_timeout(double seconds) {
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1000.0))));
}

std::string seconds_text(std::chrono::milliseconds timeout) {
  std::ostringstream out;
  out << static_cast<double>(timeout.count()) / 1000.0 << " s";
  return out.str();
}

std::string collective_wait_line(int64_t world_size, const std::string& device, std::chrono::milliseconds timeout,
                                 const std::string& setting) {
  return "world group: " + std::to_string(world_size) + " ranks over " + world_group_backend(device) +
         "; a collective waits at most " + seconds_text(timeout) + " for the other ranks (" + setting + ")";
}

bool has_world_group(const std::string& device) {
  return device == "cuda" ? compat::has_nccl() : compat::has_gloo();
}

const char* world_group_backend(const std::string& device) { return device == "cuda" ? "NCCL" : "Gloo"; }

}  // namespace enginery
