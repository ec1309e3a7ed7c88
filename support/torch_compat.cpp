// The parts of torch_compat.h that need c10d's backend headers or CUDA's: compiled once here.
#include "support/torch_compat.h"

#include <ATen/CPUGeneratorImpl.h>
#ifdef ENGINERY_HAS_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef ENGINERY_HAS_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef ENGINERY_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include <mutex>

namespace enginery {
namespace compat {

c10::intrusive_ptr<CommGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout) {
#ifdef ENGINERY_HAS_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create();
  if (timeout.count() > 0) options->timeout = timeout;
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  TORCH_CHECK(false, "enginery was built without Gloo headers (ENGINERY_HAS_GLOO undefined; Debian: libgloo-dev)");
#endif
}

c10::intrusive_ptr<CommGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout) {
#ifdef ENGINERY_HAS_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->is_high_priority_stream = true;
  if (timeout.count() > 0) options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  TORCH_CHECK(false, "enginery was built without NCCL (it is built against a CUDA torch with -DENGINERY_WITH_NCCL=ON)");
#endif
}

bool has_gloo() {
#ifdef ENGINERY_HAS_GLOO
  return true;
#else
  return false;
#endif
}

bool has_nccl() {
#ifdef ENGINERY_HAS_NCCL
  return true;
#else
  return false;
#endif
}

void cuda_set_device(int64_t index) {
#ifdef ENGINERY_WITH_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
#endif
}

void cuda_empty_cache() {
#ifdef ENGINERY_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

int64_t cuda_allocated_bytes(int64_t index) {
#ifdef ENGINERY_WITH_CUDA
  if (!torch::cuda::is_available()) return 0;
  // The caching allocator exists only once CUDA is initialised; asked before the process's first CUDA tensor (a
  // baseline taken first thing), torch 2.11 answers "Invalid device argument" instead of zero.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[0].current;
#else
  (void)index;
  return 0;
#endif
}

at::Tensor pinned_host_empty(int64_t numel, c10::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype).device(at::kCPU);
#ifdef ENGINERY_WITH_CUDA
  if (torch::cuda::is_available() && numel > 0) {
    void* data = nullptr;
    const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
    const cudaError_t status = cudaHostAlloc(&data, bytes, cudaHostAllocDefault);
    TORCH_CHECK(status == cudaSuccess, "cudaHostAlloc of ", bytes, " bytes failed: ", cudaGetErrorString(status));
    return at::from_blob(data, {numel}, [](void* p) { cudaFreeHost(p); }, options);
  }
#endif
  return at::empty({numel}, options);
}

void cuda_reset_peak_memory() {
#ifdef ENGINERY_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#endif
}

// Index 0 of the stat arrays is the aggregate over pool kinds.
double cuda_peak_allocated_gib() {
#ifdef ENGINERY_WITH_CUDA
  if (!torch::cuda::is_available()) return 0.0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0 * 1024.0);
#else
  return 0.0;
#endif
}

at::Generator make_generator(const c10::Device& device, uint64_t seed) {
#ifdef ENGINERY_WITH_CUDA
  if (device.is_cuda()) {
    auto gen = at::cuda::detail::createCUDAGenerator(device.has_index() ? device.index() : -1);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
    return gen;
  }
#endif
  TORCH_CHECK(device.is_cpu(), "make_generator: no generator for device ", device.str(), " in this build");
  return at::detail::createCPUGenerator(seed);
}

int cuda_compute_capability(int index) {
#ifdef ENGINERY_WITH_CUDA
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index);
  return major * 10 + minor;
#else
  (void)index;
  return 0;
#endif
}

}  // namespace compat
}  // namespace enginery
