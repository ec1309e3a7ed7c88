#pragma once
// Every difference between the LibTorch versions we support (1.13 through 2.11) lives here, each with a comment
// naming the versions; the only other place that tests TORCH_VERSION_* is the contract's group type
// (host_api/comm_group.h). Internal: part of enginery_support, not of the contract (docs/ARCHITECTURE.md, "Layers").
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>

#include "host_api/comm_group.h"
#include "host_api/error.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#ifdef ENGINERY_HAS_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef ENGINERY_HAS_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#include <ATen/CPUGeneratorImpl.h>
#ifdef ENGINERY_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif
#include <torch/cuda.h>

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <mutex>
#include <system_error>

#define ENGINERY_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace enginery {
namespace compat {

// ---- c10d ------------------------------------------------------------------------------------------------------
// The group type itself (c10d::ProcessGroup on 1.13, c10d::Backend on 2.x) is part of the contract:
// host_api/comm_group.h. Its constructors differ and live here.
using CommGroup = ::enginery::CommGroup;

// Gloo lacks reduce_scatter and _allgather_base in 1.13 (and _reduce_scatter_base in every version we support);
// callers emulate them (docs/ARCHITECTURE.md, "Collectives"). True where the op is native.
constexpr bool kGlooHasAllgatherBase = ENGINERY_TORCH_AT_LEAST(2, 0);

// `timeout`: how long one collective (and the group's own rendezvous) may wait for the other ranks; zero keeps
// the backend's default. Options::timeout is a plain member in 1.13 (ProcessGroup::Options) and 2.x
// (Backend::Options).
inline c10::intrusive_ptr<CommGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int size,
                                                     std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
#ifdef ENGINERY_HAS_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create();
  if (timeout.count() > 0) options->timeout = timeout;
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  TORCH_CHECK(false, "enginery was built without Gloo headers (ENGINERY_HAS_GLOO undefined); use NCCL");
#endif
}

inline bool has_gloo() {
#ifdef ENGINERY_HAS_GLOO
  return true;
#else
  return false;
#endif
}

inline bool has_nccl() {
#ifdef ENGINERY_HAS_NCCL
  return true;
#else
  return false;
#endif
}

// `timeout` as for make_gloo_group (NCCL's watchdog enforces it).
inline c10::intrusive_ptr<CommGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int size,
                                                     std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
#ifdef ENGINERY_HAS_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->is_high_priority_stream = true;
  if (timeout.count() > 0) options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  TORCH_CHECK(false, "enginery was built without NCCL (configure with -DENGINERY_WITH_NCCL=ON against a CUDA LibTorch)");
#endif
}

// ---- CUDA device and memory ----------------------------------------------------------------------------------
// Same calls in 1.13 and 2.x, but only declared in CUDA builds; CPU builds get no-ops.
inline void cuda_set_device(int64_t index) {
#ifdef ENGINERY_WITH_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
#endif
}

inline void device_synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// torch.cuda.empty_cache(): hands the caching allocator's unused blocks back to the driver, so memory freed by an
// offload is usable by another process (the rollout engine). emptyCache() takes no argument in 1.13 and a defaulted
// memory-pool id in recent 2.x; the call is the same. A no-op in CPU builds.
inline void cuda_empty_cache() {
#ifdef ENGINERY_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

// Bytes held by tensors on CUDA device `index` now (torch.cuda.memory_allocated); 0 in CPU builds.
inline int64_t cuda_allocated_bytes(int64_t index) {
#ifdef ENGINERY_WITH_CUDA
  if (!torch::cuda::is_available()) return 0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[0].current;
#else
  (void)index;
  return 0;
#endif
}

// Page-locked host memory of exactly numel elements (cudaHostAlloc, freed with the tensor), for state that lives on
// the host for good (engine.param_offload). Not the caching host allocator behind pin_memory(), which rounds every
// block up to a power of two (up to 2x the host memory for shards of a few hundred MB) and keeps freed blocks.
// Copies from it are asynchronous like from any pinned memory. CPU builds: plain memory.
inline at::Tensor pinned_host_empty(int64_t numel, c10::ScalarType dtype) {
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

inline void cuda_reset_peak_memory() {
#ifdef ENGINERY_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
#endif
}

// Peak bytes held by tensors on the current device since the last reset (allocated, not reserved: the figure
// torch.cuda.max_memory_allocated reports). Index 0 of the stat arrays is the aggregate over pool kinds.
inline double cuda_peak_allocated_gib() {
#ifdef ENGINERY_WITH_CUDA
  if (!torch::cuda::is_available()) return 0.0;
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0 * 1024.0);
#else
  return 0.0;
#endif
}

// A random generator of its own on `device`, seeded with `seed`, for sampling that repeats for a seed and leaves
// the global generators alone. Same calls in 1.13 and 2.x (at::detail::createCPUGenerator,
// at::cuda::detail::createCUDAGenerator), but the CUDA one is only declared in CUDA builds.
inline at::Generator make_generator(const c10::Device& device, uint64_t seed) {
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

// ---- filesystem -------------------------------------------------------------------------------------------------
// PyTorch 2.x wheels export std::filesystem::remove_all from libtorch.so in a form that jumps to address 0 when our
// code calls it (seen with 2.11+cu130); 1.13 is fine. Everything in the tree deletes directory trees through this.
inline std::uintmax_t remove_all(const std::filesystem::path& path, std::error_code& ec) {
  ec.clear();
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return 0;  // nothing there: like std::filesystem, not an error
  static thread_local std::uintmax_t removed;
  removed = 0;
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) -> int {
    if (::remove(p) != 0) return errno;
    ++removed;
    return 0;
  };
  const int rc = ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
  if (rc != 0) {
    ec = std::error_code(rc > 0 ? rc : errno, std::generic_category());
    return static_cast<std::uintmax_t>(-1);
  }
  return removed;
}

inline std::uintmax_t remove_all(const std::filesystem::path& path) {
  std::error_code ec;
  const auto n = compat::remove_all(path, ec);  // qualified: ADL would also find std::filesystem::remove_all
  if (ec) throw std::filesystem::filesystem_error("remove_all", path, ec);
  return n;
}

// ---- autocast --------------------------------------------------------------------------------------------------
// 1.13–2.3: per-device functions (set_cpu_enabled / set_enabled for CUDA, set_autocast_{cpu,gpu}_dtype).
// 2.4+: set_autocast_enabled(DeviceType, bool) and set_autocast_dtype(DeviceType, ScalarType).
inline void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if ENGINERY_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  }
#endif
}

inline bool autocast_enabled(c10::DeviceType device) {
#if ENGINERY_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if ENGINERY_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

// Whether autocast can compute in `dtype` on `device`. 1.13's CPU autocast accepts only bfloat16 (and its CPU
// matmuls have no fp16 kernels); fp16 CPU autocast arrived in 2.2 (torch 2.2 release notes, "AMP on CPU: float16").
inline bool autocast_supported(c10::DeviceType device, c10::ScalarType dtype) {
  if (dtype == c10::kFloat) return true;  // fp32 means no autocast at all
  if (device == c10::DeviceType::CPU) {
    if (dtype == c10::kBFloat16) return true;
    return dtype == c10::kHalf && ENGINERY_TORCH_AT_LEAST(2, 2);
  }
  return dtype == c10::kHalf || dtype == c10::kBFloat16;
}

// Same in every version, kept here so callers include one header.
inline void clear_autocast_cache() { at::autocast::clear_cache(); }

// Scoped autocast: fp32 means autocast off. Restores the previous state on exit.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype)
      : device_(device), prev_enabled_(autocast_enabled(device)), prev_dtype_(autocast_dtype(device)) {
    set_autocast(device, dtype != c10::kFloat, dtype == c10::kFloat ? prev_dtype_ : dtype);
  }
  ~AutocastScope() {
    set_autocast(device_, prev_enabled_, prev_dtype_);
    clear_autocast_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
};

// ---- attention -------------------------------------------------------------------------------------------------
// 2.0+: at::scaled_dot_product_attention (flash / memory-efficient kernels on CUDA). 1.13: none; models/ keeps
// a plain math fallback and asks here whether the fused op exists.
constexpr bool kHasSdpa = ENGINERY_TORCH_AT_LEAST(2, 0);

// Attention softmax(q k^T * scale + mask) v over q [B, H, T, D], k/v [B, H, S, D] (k/v already expanded to H heads).
// `attn_mask` is boolean (true = may attend), broadcastable to [B, H, T, S], or undefined; `is_causal` only without
// a mask (2.x refuses both). Versions: 2.0 has at::scaled_dot_product_attention(q, k, v, mask, dropout, is_causal);
// 2.1 added `scale`; 2.5 added `enable_gqa` (unused: callers expand k/v). 1.13: plain math, softmax in fp32.
inline at::Tensor sdpa_math(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& attn_mask,
                            bool is_causal, double scale) {
  auto scores = at::matmul(q, k.transpose(-2, -1)).to(at::kFloat) * scale;
  if (is_causal) {
    const int64_t t = q.size(-2), s = k.size(-2);
    auto causal = at::ones({t, s}, q.options().dtype(at::kBool)).tril(s - t);
    scores = scores.masked_fill(causal.logical_not(), -std::numeric_limits<float>::infinity());
  }
  if (attn_mask.defined()) {
    scores = scores.masked_fill(attn_mask.logical_not(), -std::numeric_limits<float>::infinity());
  }
  auto probs = at::softmax(scores, -1).to(v.scalar_type());
  return at::matmul(probs, v);
}

inline at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& attn_mask,
                       bool is_causal, double scale) {
#if ENGINERY_TORCH_AT_LEAST(2, 1)
  c10::optional<at::Tensor> mask;
  if (attn_mask.defined()) mask = attn_mask;
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, scale);
#elif ENGINERY_TORCH_AT_LEAST(2, 0)
  c10::optional<at::Tensor> mask;
  if (attn_mask.defined()) mask = attn_mask;
  // 2.0 always scales by 1/sqrt(D): fold the requested scale into q.
  const double fold = scale * std::sqrt(static_cast<double>(q.size(-1)));
  return at::scaled_dot_product_attention(fold == 1.0 ? q : q * fold, k, v, mask, 0.0, is_causal);
#else
  return sdpa_math(q, k, v, attn_mask, is_causal, scale);
#endif
}

// 2.5+: at::scaled_dot_product_attention takes k/v with fewer heads than q (enable_gqa): query head h reads kv
// head h / (H / Hkv), as transformers' repeat_kv, without expanded copies. Earlier versions: callers expand k/v and
// call sdpa(). No mask here (causal or none): the fused kernels the call is for take none.
constexpr bool kSdpaHasGqa = ENGINERY_TORCH_AT_LEAST(2, 5);

inline at::Tensor sdpa_gqa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal,
                           double scale) {
#if ENGINERY_TORCH_AT_LEAST(2, 5)
  c10::optional<at::Tensor> no_mask;
  return at::scaled_dot_product_attention(q, k, v, no_mask, 0.0, is_causal, scale, /*enable_gqa=*/true);
#else
  (void)q, (void)k, (void)v, (void)is_causal, (void)scale;
  TORCH_CHECK(false, "sdpa_gqa needs LibTorch 2.5+ (compat::kSdpaHasGqa)");
#endif
}

// ---- attention on one named backend (a benchmarking switch) ----------------------------------------------------
// ENGINERY_SDPA_BACKEND=auto|flash|cudnn|efficient|math, read once per process (docs/BENCHMARKS.md, "How the GPU
// comparison runs"). It exists so one benchmark call can time each of aten's attention kernels on the same model; it
// is not configuration: unset or `auto` keeps at::scaled_dot_product_attention's own choice. Any other value makes
// causal CUDA attention without a mask (models/layers.cpp) call that kernel's aten op directly, forward and, through
// the op's autograd node, backward, and fail loudly where the kernel cannot run instead of falling back. CPU tensors,
// masked attention and packed rows never read it.
enum class SdpaBackend { kAuto, kFlash, kCudnn, kEfficient, kMath };

inline const char* sdpa_backend_name(SdpaBackend backend) {
  static constexpr const char* kNames[] = {"auto", "flash", "cudnn", "efficient", "math"};
  return kNames[static_cast<int>(backend)];
}

inline SdpaBackend parse_sdpa_backend(const char* value) {
  const std::string v = value == nullptr ? "" : value;
  if (v.empty()) return SdpaBackend::kAuto;
  for (auto b : {SdpaBackend::kAuto, SdpaBackend::kFlash, SdpaBackend::kCudnn, SdpaBackend::kEfficient,
                 SdpaBackend::kMath}) {
    if (v == sdpa_backend_name(b)) return b;
  }
  throw EngineryError("unknown attention backend '" + v + "'", "ENGINERY_SDPA_BACKEND",
                      "auto, flash, cudnn, efficient, math");
}

// The process's choice; a forced backend is said once on stderr, so a benchmark log shows what it measured.
inline SdpaBackend sdpa_backend_from_env() {
  static const SdpaBackend chosen = [] {
    const SdpaBackend b = parse_sdpa_backend(std::getenv("ENGINERY_SDPA_BACKEND"));
    if (b != SdpaBackend::kAuto) {
      std::cerr << "enginery: ENGINERY_SDPA_BACKEND=" << sdpa_backend_name(b)
                << ": causal CUDA attention without a mask calls that aten kernel directly\n";
    }
    return b;
  }();
  return chosen;
}

// softmax(q k^T * scale) v, causal or not, no mask, no dropout, on `backend` (not kAuto). q [B, H, T, D]; k/v
// [B, Hkv, S, D] with H % Hkv == 0, query head h reading kv head h / (H / Hkv) as in sdpa_gqa: the flash and cuDNN
// kernels read the kv heads themselves, the memory-efficient and math kernels get expanded copies. Versions: 2.6+.
// The flash, memory-efficient and math ops have had these signatures since 2.1 (math's trailing enable_gqa, 2.5,
// stays defaulted); the cuDNN op took its attn_bias and compute_log_sumexp arguments during 2.5-2.6. Earlier
// versions have no switch.
constexpr bool kHasSdpaBackendChoice = ENGINERY_TORCH_AT_LEAST(2, 6);

inline at::Tensor sdpa_on_backend(SdpaBackend backend, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  bool is_causal, double scale) {
#if ENGINERY_TORCH_AT_LEAST(2, 6)
  // As at::scaled_dot_product_attention decides: the log-sum-exp is what backward reads.
  const bool for_backward =
      at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  const int64_t rep = q.size(1) / k.size(1);
  auto expanded = [rep](const at::Tensor& t) { return rep == 1 ? t : t.repeat_interleave(rep, 1); };
  const c10::optional<at::Tensor> no_mask;
  switch (backend) {
    case SdpaBackend::kFlash:
      return std::get<0>(at::_scaled_dot_product_flash_attention(q, k, v, /*dropout_p=*/0.0, is_causal,
                                                                 /*return_debug_mask=*/false, scale));
    case SdpaBackend::kCudnn:
      return std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v, no_mask, for_backward, /*dropout_p=*/0.0,
                                                                 is_causal, /*return_debug_mask=*/false, scale));
    case SdpaBackend::kEfficient:
      return std::get<0>(at::_scaled_dot_product_efficient_attention(q, expanded(k), expanded(v), no_mask,
                                                                     for_backward, /*dropout_p=*/0.0, is_causal,
                                                                     scale));
    case SdpaBackend::kMath:
      return std::get<0>(at::_scaled_dot_product_attention_math(q, expanded(k), expanded(v), no_mask,
                                                                /*dropout_p=*/0.0, is_causal,
                                                                /*dropout_mask=*/no_mask, scale));
    case SdpaBackend::kAuto:
      break;
  }
  throw EngineryError("sdpa_on_backend needs a named backend", "ENGINERY_SDPA_BACKEND",
                      "flash, cudnn, efficient, math");
#else
  (void)q, (void)k, (void)v, (void)is_causal, (void)scale;
  throw EngineryError(std::string("backend '") + sdpa_backend_name(backend) + "' needs LibTorch 2.6+",
                      "ENGINERY_SDPA_BACKEND", "auto");
#endif
}

// ---- variable-length attention ---------------------------------------------------------------------------------
// Packed rows (model.use_remove_padding): q [N, H, D], k/v [N, Hkv, D] hold several sequences back to back, sequence i
// at rows [cu_seqlens[i], cu_seqlens[i+1]) (int32, on q's device). 2.1+ CUDA builds have aten's flash kernel for this
// layout, differentiable through aten's own backward; it reads kv head h / (H / Hkv) itself (GQA). It takes fp16/bf16
// with head_dim a multiple of 8 up to 256 on sm80+; anything else takes the caller's per-sequence path. Versions: 2.1
// to 2.3 end the signature at `scale`; later ones append defaulted window / seqused_k / alibi arguments, so this call
// compiles on all of them. 1.13 and 2.0: no varlen kernel.
#if ENGINERY_TORCH_AT_LEAST(2, 1) && defined(ENGINERY_WITH_CUDA)
constexpr bool kHasVarlenFlash = true;
#else
constexpr bool kHasVarlenFlash = false;
#endif

#ifdef ENGINERY_WITH_CUDA
// Compute capability of CUDA device `index` as major * 10 + minor (sm80 = 80, sm89 = 89, sm90 = 90).
inline int cuda_compute_capability(int index) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index);
  return major * 10 + minor;
}
#endif

inline bool varlen_flash_applies(const at::Tensor& q) {
  if (!kHasVarlenFlash || !q.is_cuda()) return false;
  const auto dtype = q.scalar_type();
  const int64_t d = q.size(-1);
  if ((dtype != at::kBFloat16 && dtype != at::kHalf) || d % 8 != 0 || d > 256) return false;
#ifdef ENGINERY_WITH_CUDA
  return cuda_compute_capability(q.get_device()) >= 80;
#else
  return false;
#endif
}

inline at::Tensor varlen_flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& cu_seqlens, int64_t max_len, double scale) {
#if ENGINERY_TORCH_AT_LEAST(2, 1) && defined(ENGINERY_WITH_CUDA)
  auto result = at::_flash_attention_forward(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, /*dropout_p=*/0.0,
                                             /*is_causal=*/true, /*return_debug_mask=*/false, scale);
  return std::get<0>(result);
#else
  (void)q, (void)k, (void)v, (void)cu_seqlens, (void)max_len, (void)scale;
  TORCH_CHECK(false, "varlen_flash_attention needs a CUDA build of LibTorch 2.1+ (compat::kHasVarlenFlash)");
#endif
}

// ---- FP8 matmuls ------------------------------------------------------------------------------------------------
// at::_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum): a row-major, b column-major,
// float8 operands (not both e5m2), float32 scales (one element each: tensor-wise), sm89+. 2.5 made the scales
// required and the result a single tensor (2.1 to 2.4 returned (out, amax) and took optional scales); enginery
// uses it from 2.5 on, the signature kept through 2.11. 1.13 has no float8 types at all.
#if ENGINERY_TORCH_AT_LEAST(2, 5)
constexpr bool kHasScaledMm = true;
inline c10::ScalarType float8_e4m3() { return c10::ScalarType::Float8_e4m3fn; }
inline c10::ScalarType float8_e5m2() { return c10::ScalarType::Float8_e5m2; }
inline at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                            const at::Tensor& scale_b, c10::ScalarType out_dtype, bool fast_accum) {
  return at::_scaled_mm(a, b, scale_a, scale_b, std::nullopt, std::nullopt, out_dtype, fast_accum);
}
#else
constexpr bool kHasScaledMm = false;
inline c10::ScalarType float8_e4m3() { TORCH_CHECK(false, "float8 needs LibTorch 2.5+ (compat::kHasScaledMm)"); }
inline c10::ScalarType float8_e5m2() { TORCH_CHECK(false, "float8 needs LibTorch 2.5+ (compat::kHasScaledMm)"); }
inline at::Tensor scaled_mm(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            c10::ScalarType, bool) {
  TORCH_CHECK(false, "scaled_mm needs LibTorch 2.5+ (compat::kHasScaledMm)");
}
#endif

// Whether `device` runs FP8 GEMMs: a CUDA device of compute capability 8.9 or later (Ada, Hopper and newer).
inline bool fp8_gemm_device(const torch::Device& device) {
#ifdef ENGINERY_WITH_CUDA
  if (!device.is_cuda() || !torch::cuda::is_available()) return false;
  return cuda_compute_capability(device.has_index() ? device.index() : 0) >= 89;
#else
  (void)device;
  return false;
#endif
}

// ---- fused kernels ---------------------------------------------------------------------------------------------
// at::rms_norm exists from 2.4 (a composite of ATen ops); 2.8+ routes CUDA to a fused kernel (aten::_fused_rms_norm
// and its backward; measured in 2.11 on an H200: 0.13 ms forward+backward for [8192 x 1536] bf16 against 0.63 ms
// for transformers' composite). Only the fused versions are worth calling: kHasFusedRmsNorm. y = x * rsqrt(mean(x^2)
// + eps) * weight over the last dim, computed in fp32, returned in x's dtype.
constexpr bool kHasFusedRmsNorm = ENGINERY_TORCH_AT_LEAST(2, 8);

inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
#if ENGINERY_TORCH_AT_LEAST(2, 4)
  const int64_t last = x.size(-1);
  return at::rms_norm(x, at::IntArrayRef(&last, 1), weight, eps);
#else
  (void)x, (void)weight, (void)eps;
  TORCH_CHECK(false, "rms_norm needs LibTorch 2.4+ (compat::kHasFusedRmsNorm)");
#endif
}

// 2.1+ (CUDA): at::_fused_adamw_, torch.optim.AdamW(fused=True)'s multi-tensor kernel. It skips the update on
// device when found_inf (a 1-element fp32 tensor) is non-zero and divides the grads by grad_scale first; the
// state_steps (one fp32 scalar tensor per param) must already count this step. 1.13: none, callers loop.
constexpr bool kHasFusedAdamW = ENGINERY_TORCH_AT_LEAST(2, 1);

inline void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, at::TensorList state_steps, double lr, double beta1, double beta2,
                         double weight_decay, double eps, const at::Tensor& grad_scale, const at::Tensor& found_inf) {
#if ENGINERY_TORCH_AT_LEAST(2, 1)
  c10::optional<at::Tensor> scale, inf;
  if (grad_scale.defined()) scale = grad_scale;
  if (found_inf.defined()) inf = found_inf;
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/at::TensorList(), state_steps, lr,
                    beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false, scale, inf);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)state_steps, (void)lr, (void)beta1,
      (void)beta2, (void)weight_decay, (void)eps, (void)grad_scale, (void)found_inf;
  TORCH_CHECK(false, "fused_adamw_ needs LibTorch 2.1+ (compat::kHasFusedAdamW)");
#endif
}

}  // namespace compat
}  // namespace enginery
