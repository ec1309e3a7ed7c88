#pragma once
// What enginery needs of LibTorch beyond its plain API, in one place: PyTorch 2.8 or newer (the build refuses older:
// cmake/EngineryTorchChecks.cmake; tested on 2.11, the pin of requirements.txt), so no version branches are left.
// It holds the c10d group constructors and the CUDA calls that only CUDA builds declare (compiled in
// torch_compat.cpp, so no includer parses c10d's backend headers), the filesystem workaround for PyTorch wheels, the
// autocast scope and the attention, FP8 and fused-optimizer entry points with their device conditions. Internal:
// part of enginery_support, not of the contract (docs/ARCHITECTURE.md, "Layers").
#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>
#include <system_error>

#include "host_api/comm_group.h"
#include "host_api/error.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace enginery {
namespace compat {

// ---- c10d ------------------------------------------------------------------------------------------------------
// The group type itself (c10d::Backend) is part of the contract: host_api/comm_group.h. The constructors live in
// torch_compat.cpp, so that only it parses c10d's Gloo and NCCL headers (seconds of every includer's compile).
using CommGroup = ::enginery::CommGroup;

// `timeout`: how long one collective (and the group's own rendezvous) may wait for the other ranks; zero keeps
// the backend's default. A build without that backend throws.
c10::intrusive_ptr<CommGroup> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
// `timeout` as for make_gloo_group (NCCL's watchdog enforces it).
c10::intrusive_ptr<CommGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
bool has_gloo();
bool has_nccl();

// ---- CUDA device and memory ----------------------------------------------------------------------------------
// Declared in every build; a build without CUDA gets no-ops (torch_compat.cpp), so callers need no #ifdef.
void cuda_set_device(int64_t index);

inline void device_synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// torch.cuda.empty_cache(): hands the caching allocator's unused blocks back to the driver, so memory freed by an
// offload is usable by another process (the rollout engine).
void cuda_empty_cache();

// Bytes held by tensors on CUDA device `index` now (torch.cuda.memory_allocated); 0 in CPU builds.
int64_t cuda_allocated_bytes(int64_t index);

// Page-locked host memory of exactly numel elements (cudaHostAlloc, freed with the tensor), for state that lives on
// the host for good (engine.param_offload). Not the caching host allocator behind pin_memory(), which rounds every
// block up to a power of two (up to 2x the host memory for shards of a few hundred MB) and keeps freed blocks.
// Copies from it are asynchronous like from any pinned memory. CPU builds: plain memory.
at::Tensor pinned_host_empty(int64_t numel, c10::ScalarType dtype);

void cuda_reset_peak_memory();

// Peak bytes held by tensors on the current device since the last reset (allocated, not reserved: the figure
// torch.cuda.max_memory_allocated reports).
double cuda_peak_allocated_gib();

// A random generator of its own on `device`, seeded with `seed`, for sampling that repeats for a seed and leaves
// the global generators alone.
at::Generator make_generator(const c10::Device& device, uint64_t seed);

// Compute capability of CUDA device `index` as major * 10 + minor (sm80 = 80, sm89 = 89, sm90 = 90); 0 in CPU
// builds.
int cuda_compute_capability(int index);

// ---- filesystem -------------------------------------------------------------------------------------------------
// PyTorch 2.x wheels export std::filesystem::remove_all from libtorch.so in a form that jumps to address 0 when our
// code calls it (seen with 2.11+cu130). Everything in the tree deletes directory trees through this.
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
inline void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, enabled);
}

inline bool autocast_enabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }

inline c10::ScalarType autocast_dtype(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }

// Whether autocast can compute in `dtype` on `device`: fp32 (no autocast at all), bf16 and fp16, on CPU and CUDA.
inline bool autocast_supported(c10::DeviceType device, c10::ScalarType dtype) {
  (void)device;
  return dtype == c10::kFloat || dtype == c10::kHalf || dtype == c10::kBFloat16;
}

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
// Attention softmax(q k^T * scale + mask) v over q [B, H, T, D], k/v [B, H, S, D] (k/v already expanded to H heads),
// in plain ATen ops with the softmax in fp32: the reference the fused kernels are tested against.
// `attn_mask` is boolean (true = may attend), broadcastable to [B, H, T, S], or undefined.
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

// at::scaled_dot_product_attention with the same arguments; `is_causal` only without a mask (torch refuses both).
inline at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& attn_mask,
                       bool is_causal, double scale) {
  std::optional<at::Tensor> mask;
  if (attn_mask.defined()) mask = attn_mask;
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, scale);
}

// k/v with fewer heads than q (enable_gqa): query head h reads kv head h / (H / Hkv), as transformers' repeat_kv,
// without expanded copies. No mask here (causal or none): the fused kernels the call is for take none.
inline at::Tensor sdpa_gqa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool is_causal,
                           double scale) {
  std::optional<at::Tensor> no_mask;
  return at::scaled_dot_product_attention(q, k, v, no_mask, 0.0, is_causal, scale, /*enable_gqa=*/true);
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
// kernels read the kv heads themselves, the memory-efficient and math kernels get expanded copies.

inline at::Tensor sdpa_on_backend(SdpaBackend backend, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  bool is_causal, double scale) {
  // As at::scaled_dot_product_attention decides: the log-sum-exp is what backward reads.
  const bool for_backward =
      at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  // Below autocast, as at::scaled_dot_product_attention runs its kernels: the math kernel is a composition of aten
  // ops, and under bf16 autocast its matmuls would run in bf16 while its softmax ran in fp32, a mix whose backward
  // fails ("expected input and grad types to match"). q, k and v arrive in one dtype.
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
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
}

// ---- variable-length attention ---------------------------------------------------------------------------------
// Packed rows (model.use_remove_padding): q [N, H, D], k/v [N, Hkv, D] hold several sequences back to back, sequence i
// at rows [cu_seqlens[i], cu_seqlens[i+1]) (int32, on q's device). CUDA builds have aten's flash kernel for this
// layout, differentiable through aten's own backward; it reads kv head h / (H / Hkv) itself (GQA). It takes fp16/bf16
// with head_dim a multiple of 8 up to 256 on sm80+; anything else takes the caller's per-sequence path.
#ifdef ENGINERY_WITH_CUDA
constexpr bool kHasVarlenFlash = true;
#else
constexpr bool kHasVarlenFlash = false;
#endif

inline bool varlen_flash_applies(const at::Tensor& q) {
  if (!kHasVarlenFlash || !q.is_cuda()) return false;
  const auto dtype = q.scalar_type();
  const int64_t d = q.size(-1);
  if ((dtype != at::kBFloat16 && dtype != at::kHalf) || d % 8 != 0 || d > 256) return false;
  return cuda_compute_capability(q.get_device()) >= 80;
}

inline at::Tensor varlen_flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& cu_seqlens, int64_t max_len, double scale) {
  TORCH_CHECK(kHasVarlenFlash, "varlen_flash_attention needs a CUDA build (compat::kHasVarlenFlash)");
  auto result = at::_flash_attention_forward(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, /*dropout_p=*/0.0,
                                             /*is_causal=*/true, /*return_debug_mask=*/false, scale);
  return std::get<0>(result);
}

// ---- FP8 matmuls ------------------------------------------------------------------------------------------------
// at::_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum): a row-major, b column-major,
// float8 operands (not both e5m2), float32 scales (one element each: tensor-wise), sm89+.
inline c10::ScalarType float8_e4m3() { return c10::ScalarType::Float8_e4m3fn; }
inline c10::ScalarType float8_e5m2() { return c10::ScalarType::Float8_e5m2; }
inline at::Tensor scaled_mm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a,
                            const at::Tensor& scale_b, c10::ScalarType out_dtype, bool fast_accum) {
  return at::_scaled_mm(a, b, scale_a, scale_b, std::nullopt, std::nullopt, out_dtype, fast_accum);
}

// Whether `device` runs FP8 GEMMs: a CUDA device of compute capability 8.9 or later (Ada, Hopper and newer).
inline bool fp8_gemm_device(const torch::Device& device) {
  if (!device.is_cuda() || !torch::cuda::is_available()) return false;
  return cuda_compute_capability(device.has_index() ? device.index() : 0) >= 89;
}

// ---- fused kernels ---------------------------------------------------------------------------------------------
// at::rms_norm: on CUDA a fused kernel (aten::_fused_rms_norm and its backward; measured in 2.11 on an H200: 0.13 ms
// forward+backward for [8192 x 1536] bf16 against 0.63 ms for transformers' composite). y = x * rsqrt(mean(x^2) +
// eps) * weight over the last dim, computed in fp32, returned in x's dtype.
inline at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const int64_t last = x.size(-1);
  return at::rms_norm(x, at::IntArrayRef(&last, 1), weight, eps);
}

// at::_fused_adamw_, torch.optim.AdamW(fused=True)'s multi-tensor kernel. It skips the update on device when
// found_inf (a 1-element fp32 tensor) is non-zero and divides the grads by grad_scale first; the state_steps (one
// fp32 scalar tensor per param) must already count this step.
inline void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, at::TensorList state_steps, double lr, double beta1, double beta2,
                         double weight_decay, double eps, const at::Tensor& grad_scale, const at::Tensor& found_inf) {
  std::optional<at::Tensor> scale, inf;
  if (grad_scale.defined()) scale = grad_scale;
  if (found_inf.defined()) inf = found_inf;
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/at::TensorList(), state_steps, lr,
                    beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false, scale, inf);
}

}  // namespace compat
}  // namespace enginery
