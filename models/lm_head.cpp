#include "models/lm_head.h"

#include <torch/csrc/autograd/custom_function.h>

#include "support/torch_compat.h"
#include "kernels/fused_cuda.h"

namespace enginery {
namespace models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kChunkLogitBytes = 64ll << 20;
// On CUDA a chunk's matmuls must be large to run near peak and every chunk re-reads the whole [V, H] weight and
// re-writes the fp32 weight gradient, so chunks are bigger there (measured on an H200 for Qwen2.5's vocabulary:
// 110 rows 160 ms per head forward+backward, 512 rows 62 ms, 1024 rows 50 ms, 2048 rows 44 ms).
constexpr int64_t kChunkLogitBytesCuda = 512ll << 20;

// Log-softmax of one chunk's logits, in fp32 (the dtype argument upcasts inside the kernel: no fp32 copy of the
// logits is made first).
torch::Tensor chunk_log_softmax(const torch::Tensor& h, const torch::Tensor& w, c10::ScalarType dtype) {
  return torch::log_softmax(torch::matmul(h.to(dtype), w.t()), -1, torch::kFloat);
}

class ChunkedLogProbFunction : public torch::autograd::Function<ChunkedLogProbFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, torch::Tensor hidden, torch::Tensor weight, torch::Tensor targets,
                               bool compute_entropy, int64_t compute_dtype, int64_t chunk_rows) {
    RECORD_USER_SCOPE("lm_head::forward");
    const auto dtype = static_cast<c10::ScalarType>(compute_dtype);
    ctx->save_for_backward({hidden, weight, targets});
    ctx->saved_data["entropy"] = compute_entropy;
    ctx->saved_data["dtype"] = compute_dtype;
    ctx->saved_data["chunk"] = chunk_rows;
    const int64_t n = hidden.size(0);
    auto opts = hidden.options().dtype(torch::kFloat);
    auto log_probs = torch::empty({n}, opts);
    auto entropy = compute_entropy ? torch::empty({n}, opts) : torch::zeros({0}, opts);
    auto w = weight.to(dtype);
    for (int64_t s = 0; s < n; s += chunk_rows) {
      const int64_t len = std::min(chunk_rows, n - s);
      auto logp = chunk_log_softmax(hidden.narrow(0, s, len), w, dtype);
      log_probs.narrow(0, s, len).copy_(logp.gather(1, targets.narrow(0, s, len).unsqueeze(1)).squeeze(1));
      if (compute_entropy) entropy.narrow(0, s, len).copy_(-(logp.exp() * logp).sum(-1));
    }
    if (!compute_entropy) ctx->mark_non_differentiable({entropy});
    return {log_probs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_USER_SCOPE("lm_head::backward");
    auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& targets = saved[2];
    const bool with_entropy = ctx->saved_data["entropy"].toBool();
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    const int64_t chunk_rows = ctx->saved_data["chunk"].toInt();
    // Casts below are explicit; keep autocast from re-casting them differently on this thread.
    compat::AutocastScope no_autocast(hidden.device().type(), c10::kFloat);
    torch::NoGradGuard no_grad;
    const auto& g_lp = grads[0];
    const bool use_ent = with_entropy && grads[1].defined();
    const int64_t n = hidden.size(0);
    auto w = weight.to(dtype);
    auto grad_hidden = torch::empty_like(hidden);
    torch::Tensor grad_weight;  // fp32 accumulator over chunks
    for (int64_t s = 0; s < n; s += chunk_rows) {
      const int64_t len = std::min(chunk_rows, n - s);
      auto h = hidden.narrow(0, s, len).to(dtype);
      auto logits = torch::matmul(h, w.t());
      // d log p_y / dz = onehot(y) - p, formed in place in the fp32 probabilities.
      torch::Tensor gz;
      if (use_ent) {
        // H = -sum p log p;  dH/dz_j = -p_j (log p_j + H)
        auto logp = torch::log_softmax(logits, -1, torch::kFloat);
        logits.reset();
        auto p = logp.exp();
        auto ent = -(p * logp).sum(-1, /*keepdim=*/true);
        gz = -(p * (logp + ent)) * grads[1].narrow(0, s, len).to(torch::kFloat).unsqueeze(1);
        if (g_lp.defined()) {
          auto g = g_lp.narrow(0, s, len).to(torch::kFloat).unsqueeze(1);
          gz.sub_(p * g);
          gz.scatter_add_(1, targets.narrow(0, s, len).unsqueeze(1), g);
        }
      } else if (g_lp.defined()) {
        gz = torch::softmax(logits, -1, torch::kFloat);
        logits.reset();
        auto g = g_lp.narrow(0, s, len).to(torch::kFloat).unsqueeze(1);
        gz.mul_(-g);
        gz.scatter_add_(1, targets.narrow(0, s, len).unsqueeze(1), g);
      } else {
        logits.reset();
        gz = torch::zeros({len, w.size(0)}, hidden.options().dtype(torch::kFloat));
      }
      auto gzc = gz.to(dtype);
      gz.reset();
      auto gh = grad_hidden.narrow(0, s, len);
      if (gh.scalar_type() == dtype) {
        torch::mm_out(gh, gzc, w);  // rows of a contiguous tensor: written in place
      } else {
        gh.copy_(torch::mm(gzc, w));
      }
      auto gw = torch::mm(gzc.t(), h);
      if (grad_weight.defined()) {
        grad_weight.add_(gw);  // fp32 += dtype: promoted inside the kernel, no fp32 copy of gw
      } else {
        grad_weight = gw.to(torch::kFloat);
      }
    }
    if (!grad_weight.defined()) grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat));
    return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

// The CUDA path: logits stay in the compute dtype (bf16 / fp16) and enginery's row kernels read them once for the
// log-sum-exp, target log-prob and entropy, and once more in backward to overwrite them with their gradient. No
// fp32 copy of a chunk is ever made, so chunks can be twice as many rows for the same memory; the weight gradient
// of each chunk is added into the fp32 accumulator in one pass.
class FusedChunkedLogProbFunction : public torch::autograd::Function<FusedChunkedLogProbFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, torch::Tensor hidden, torch::Tensor weight, torch::Tensor targets,
                               bool compute_entropy, int64_t compute_dtype, int64_t chunk_rows) {
    RECORD_USER_SCOPE("lm_head::forward");
    const auto dtype = static_cast<c10::ScalarType>(compute_dtype);
    const int64_t n = hidden.size(0);
    auto opts = hidden.options().dtype(torch::kFloat);
    auto lse = torch::empty({n}, opts);
    auto log_probs = torch::empty({n}, opts);
    auto entropy = compute_entropy ? torch::empty({n}, opts) : torch::zeros({0}, opts);
    auto tgt = targets.to(torch::kLong).contiguous();
    auto w = weight.to(dtype).contiguous();
    for (int64_t s = 0; s < n; s += chunk_rows) {
      const int64_t len = std::min(chunk_rows, n - s);
      auto logits = torch::mm(hidden.narrow(0, s, len).to(dtype), w.t());
      kernels::log_softmax_stats(logits, tgt.narrow(0, s, len), lse.narrow(0, s, len), log_probs.narrow(0, s, len),
                                 compute_entropy ? entropy.narrow(0, s, len) : torch::Tensor());
    }
    ctx->save_for_backward({hidden, weight, tgt, lse, entropy});
    ctx->saved_data["entropy"] = compute_entropy;
    ctx->saved_data["dtype"] = compute_dtype;
    ctx->saved_data["chunk"] = chunk_rows;
    if (!compute_entropy) ctx->mark_non_differentiable({entropy});
    return {log_probs, entropy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_USER_SCOPE("lm_head::backward");
    auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& tgt = saved[2];
    const auto& lse = saved[3];
    const auto& entropy = saved[4];
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    const int64_t chunk_rows = ctx->saved_data["chunk"].toInt();
    const bool use_ent = ctx->saved_data["entropy"].toBool() && grads[1].defined();
    compat::AutocastScope no_autocast(hidden.device().type(), c10::kFloat);
    torch::NoGradGuard no_grad;
    const int64_t n = hidden.size(0);
    auto w = weight.to(dtype).contiguous();
    auto grad_hidden = torch::empty_like(hidden);
    auto grad_weight = torch::zeros(w.sizes(), w.options().dtype(torch::kFloat));
    auto rows = [](const torch::Tensor& t, int64_t s, int64_t len) { return t.defined() ? t.narrow(0, s, len) : t; };
    const auto g_lp = grads[0];
    const auto g_ent = use_ent ? grads[1] : torch::Tensor();
    for (int64_t s = 0; s < n; s += chunk_rows) {
      const int64_t len = std::min(chunk_rows, n - s);
      auto h = hidden.narrow(0, s, len).to(dtype);
      auto gz = torch::mm(h, w.t());
      kernels::log_softmax_grad_(gz, tgt.narrow(0, s, len), lse.narrow(0, s, len),
                                 use_ent ? entropy.narrow(0, s, len) : torch::Tensor(), rows(g_lp, s, len),
                                 rows(g_ent, s, len));
      auto gh = grad_hidden.narrow(0, s, len);
      if (gh.scalar_type() == dtype) {
        torch::mm_out(gh, gz, w);
      } else {
        gh.copy_(torch::mm(gz, w));
      }
      kernels::accumulate_(grad_weight, torch::mm(gz.t(), h));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

bool fused_head_applies(const torch::Tensor& hidden, c10::ScalarType dtype) {
  return kernels::available(kernels::Kernel::kLogSoftmax) && hidden.is_cuda() && (dtype == torch::kBFloat16 || dtype == torch::kHalf);
}

}  // namespace

int64_t default_chunk_rows(int64_t vocab_size) {
  return std::max<int64_t>(1, kChunkLogitBytes / (4 * std::max<int64_t>(1, vocab_size)));
}

int64_t default_chunk_rows(int64_t vocab_size, const torch::Device& device) {
  if (!device.is_cuda()) return default_chunk_rows(vocab_size);
  return std::max<int64_t>(1, kChunkLogitBytesCuda / (4 * std::max<int64_t>(1, vocab_size)));
}

TokenLogProbs chunked_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                                bool compute_entropy, c10::ScalarType compute_dtype, int64_t chunk_rows) {
  const bool fused = fused_head_applies(hidden, compute_dtype);
  if (chunk_rows <= 0) {
    // The fused path keeps no fp32 copy of a chunk: the same bytes hold twice the rows.
    chunk_rows = default_chunk_rows(weight.size(0), hidden.device()) * (fused ? 2 : 1);
  }
  auto out = fused ? FusedChunkedLogProbFunction::apply(hidden, weight, targets, compute_entropy,
                                                        static_cast<int64_t>(compute_dtype), chunk_rows)
                   : ChunkedLogProbFunction::apply(hidden, weight, targets, compute_entropy,
                                                   static_cast<int64_t>(compute_dtype), chunk_rows);
  TokenLogProbs r;
  r.log_probs = out[0];
  if (compute_entropy) r.entropy = out[1];
  return r;
}

TokenLogProbs full_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             bool compute_entropy, c10::ScalarType compute_dtype) {
  auto logp = chunk_log_softmax(hidden, weight.to(compute_dtype), compute_dtype);
  TokenLogProbs r;
  r.log_probs = logp.gather(1, targets.unsqueeze(1)).squeeze(1);
  if (compute_entropy) r.entropy = -(logp.exp() * logp).sum(-1);
  return r;
}

}  // namespace models
}  // namespace enginery
