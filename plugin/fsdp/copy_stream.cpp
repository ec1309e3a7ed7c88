#include "plugin/fsdp/copy_stream.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/accumulate.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <thread>

#include "support/torch_compat.h"

namespace enginery {
namespace fsdp {

CopyStream::CopyStream(const torch::Device& device) : device_(device) {
  if (!device_.is_cuda()) return;
  const c10::impl::VirtualGuardImpl impl(device_.type());
  up_ = impl.getStreamFromGlobalPool(device_);
  down_ = impl.getStreamFromGlobalPool(device_);
  // The pool hands streams out round robin: two calls give two streams unless it has exactly one.
  if (*down_ == *up_) down_ = impl.getStreamFromGlobalPool(device_);
}

torch::Tensor CopyStream::host_empty(at::IntArrayRef sizes, c10::ScalarType dtype) const {
  const int64_t numel = c10::multiply_integers(sizes);
  if (!device_.is_cuda()) return torch::empty(sizes, torch::TensorOptions().dtype(dtype).device(torch::kCPU));
  // Pinning allocates in the current device's context: on this engine's GPU, not on GPU 0 for every rank.
  const c10::DeviceGuard on_engine_device(device_);
  return compat::pinned_host_empty(numel, dtype).view(sizes);
}

c10::Stream CopyStream::compute_stream() const {
  return c10::impl::VirtualGuardImpl(device_.type()).getStream(device_);
}

void CopyStream::after_compute(const c10::Stream& side) const {
  c10::Event queued(device_.type());
  queued.record(compute_stream());
  queued.block(side);
}

std::shared_ptr<c10::Event> CopyStream::record(const c10::Stream& side) const {
  auto done = std::make_shared<c10::Event>(device_.type());
  done->record(side);
  return done;
}

CopyStream::Pending CopyStream::upload(const torch::Tensor& src, const std::shared_ptr<c10::Event>& written) {
  torch::NoGradGuard no_grad;
  Pending out;
  out.tensor = torch::empty(src.sizes(), src.options().device(device_).pinned_memory(false));  // on the compute stream
  if (!up_) {
    out.tensor.copy_(src);
    return out;
  }
  after_compute(*up_);
  if (written) written->block(*up_);
  c10::StreamGuard on_side(*up_);
  out.tensor.copy_(src, /*non_blocking=*/true);
  // A destination dropped without wait_for (an exception, teardown) must not be reused before this copy wrote it.
  c10::impl::VirtualGuardImpl(device_.type()).recordDataPtrOnStream(out.tensor.storage().data_ptr(), *up_);
  out.event = record(*up_);
  return out;
}

std::shared_ptr<c10::Event> CopyStream::download_into(torch::Tensor& dst, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  if (!down_) {
    dst.copy_(src);
    return nullptr;
  }
  after_compute(*down_);
  c10::StreamGuard on_side(*down_);
  dst.copy_(src, /*non_blocking=*/true);
  c10::impl::VirtualGuardImpl(device_.type()).recordDataPtrOnStream(src.storage().data_ptr(), *down_);
  return record(*down_);
}

void CopyStream::wait_for(const Pending& copy) const {
  if (copy.event) copy.event->block(compute_stream());
}

void CopyStream::host_wait(const std::shared_ptr<c10::Event>& event) {
  // c10::Event has no host-side wait before LibTorch 2.x; a copy takes milliseconds, so polling costs little.
  if (!event) return;
  while (!event->query()) std::this_thread::yield();
}

void CopyStream::synchronize() const {
  if (up_) up_->synchronize();
  if (down_) down_->synchronize();
}

void move_to_host(torch::Tensor& t, const CopyStream& copies) {
  torch::NoGradGuard no_grad;
  auto host = copies.host_empty(t.sizes(), t.scalar_type());
  host.copy_(t);
  t.set_data(host);
}

}  // namespace fsdp
}  // namespace enginery
