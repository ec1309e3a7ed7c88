#pragma once
// Copies between pinned host memory and the GPU on side streams, so that they overlap the compute stream
// (docs/ARCHITECTURE.md, "The contract", offload while computing): engine.param_offload streams the fp32 master shards
// up for each unit's unshard and the shard gradients down after each reduction, and the offloaded optimizer step
// streams each unit's state through the device. Uploads and downloads take two different streams, so both directions of
// the bus work at once.
//
// Ordering, with the CUDA caching allocator's rules: a destination is allocated on the compute stream and the side
// stream first waits for everything the compute stream has queued (the block may have been freed by a kernel still
// queued there, and the source may still be being written); the compute stream waits on a copy's event before it
// reads the destination; a device source read by the download stream is recorded on that stream, so the allocator
// does not hand its block out again before the copy has read it. The host reads a download's destination only
// after synchronize().
//
// On a CPU engine every copy is synchronous into fresh storage: the same code runs with host and device the same
// memory, which is what the CPU tests exercise.
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

#include <memory>

#include "plugin/fsdp/fsdp_export.h"

namespace enginery {
namespace fsdp {

class ENGINERY_FSDP_API CopyStream {
 public:
  // A copy in flight: `tensor` is valid for the compute stream once it waited (wait_for); a null event means
  // the copy is complete already.
  struct Pending {
    torch::Tensor tensor;
    std::shared_ptr<c10::Event> event;
  };

  explicit CopyStream(const torch::Device& device);

  const torch::Device& device() const { return device_; }
  // Whether the copies are asynchronous (a GPU engine).
  bool asynchronous() const { return device_.is_cuda(); }

  // Host memory for state that lives there: pinned, of exactly this size, when the engine computes on a GPU (so
  // copies are DMA that do not block), plain memory on a CPU engine (pinning needs CUDA).
  torch::Tensor host_empty(at::IntArrayRef sizes, c10::ScalarType dtype) const;

  // A fresh copy of `src` on the device (an upload), issued after the compute stream's queued work and, when given,
  // after `written` (the download that last wrote `src`): the copy stream waits, the host does not.
  Pending upload(const torch::Tensor& src, const std::shared_ptr<c10::Event>& written = nullptr);
  // Copies device tensor `src` into host tensor `dst` (a download), issued after the compute stream's queued work;
  // the host reads `dst` after synchronize() (or the returned event).
  std::shared_ptr<c10::Event> download_into(torch::Tensor& dst, const torch::Tensor& src);

  // The compute stream waits for `copy` before its next kernel.
  void wait_for(const Pending& copy) const;
  // The host waits for one copy / for every copy issued so far.
  static void host_wait(const std::shared_ptr<c10::Event>& event);
  void synchronize() const;

 private:
  c10::Stream compute_stream() const;
  // Makes `side` wait for the compute stream's queued work.
  void after_compute(const c10::Stream& side) const;
  std::shared_ptr<c10::Event> record(const c10::Stream& side) const;

  torch::Device device_;
  c10::optional<c10::Stream> up_, down_;  // GPU engines only
};

// Moves `t` (the tensor object itself, via set_data, so every holder follows) into host memory of `copies`.
ENGINERY_FSDP_API void move_to_host(torch::Tensor& t, const CopyStream& copies);

}  // namespace fsdp
}  // namespace enginery
