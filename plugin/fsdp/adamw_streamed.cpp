// AdamW's streamed step (engine.param_offload / engine.optimizer_offload; docs/ARCHITECTURE.md, "The contract", offload
// while computing). The state that lives on the host passes through the device one shard (one FSDP unit) at a time: the
// upload of shard i + 1 runs on one side stream while shard i updates on the compute stream, and the download of the
// updated shard i - 1 on another, so both directions of the bus and the kernels overlap. The update is the resident
// step's own kernel on the staged tensors, which is elementwise: the result is what the resident step computes.
//
// Why the device by default: a step streamed this way moves each byte over the bus once each way and computes at
// device speed with the resident step's kernel (and rounding), and the parameters must be uploaded for the next
// forward either way. The alternative below, step_on_host (engine.<backend>.offload_step = host), moves nothing but
// is bound by host memory bandwidth; bench/gpu/run_offload_bench.sh measures the two.
#include <ATen/Parallel.h>

#include <cmath>
#include <deque>

#include "host_api/error.h"
#include "plugin/fsdp/adamw.h"

namespace enginery {
namespace fsdp {
namespace {

// One shard's four tensors as the step uses them: the resident tensor itself, or an upload of the host one.
struct Staged {
  CopyStream::Pending param, grad, exp_avg, exp_avg_sq;
};

// At most this many shards are staged or on their way back at once: bounds the device memory the step borrows.
constexpr size_t kInFlight = 3;

}  // namespace

void AdamW::stream_through(std::shared_ptr<CopyStream> copies, bool params_on_host, bool state_on_host) {
  copies_ = std::move(copies);
  params_on_host_ = params_on_host;
  state_on_host_ = state_on_host;
  if (!state_on_host_) return;
  for (auto* list : {&exp_avg_, &exp_avg_sq_}) {
    for (auto& t : *list) move_to_host(t, *copies_);
  }
}

void AdamW::step_streamed(double lr, const std::vector<torch::Tensor>& grad_multipliers,
                          const torch::Tensor& grad_scale, const torch::Tensor& found_inf) {
  if (!copies_) throw EngineryError("the optimizer state is resident; call step()", "AdamW::step_streamed");
  torch::NoGradGuard no_grad;
  ++step_;
  if (fused_) advance_device_steps(found_inf);
  CopyStream& copies = *copies_;
  auto stage = [&](torch::Tensor& t, bool on_host) {
    return on_host ? copies.upload(t) : CopyStream::Pending{t, nullptr};
  };
  auto stage_shard = [&](size_t i) {
    return Staged{stage(params_[i], params_on_host_), stage(grads_[i], params_on_host_),
                  stage(exp_avg_[i], state_on_host_), stage(exp_avg_sq_[i], state_on_host_)};
  };
  std::deque<std::shared_ptr<c10::Event>> downloads;  // of the shards updated so far, oldest first
  const size_t n = params_.size();
  std::deque<Staged> ahead;
  if (n > 0) ahead.push_back(stage_shard(0));
  for (size_t i = 0; i < n; ++i) {
    while (downloads.size() + ahead.size() >= kInFlight && !downloads.empty()) {
      CopyStream::host_wait(downloads.front());
      downloads.pop_front();
    }
    if (i + 1 < n) ahead.push_back(stage_shard(i + 1));
    Staged s = std::move(ahead.front());
    ahead.pop_front();
    for (const auto* part : {&s.param, &s.grad, &s.exp_avg, &s.exp_avg_sq}) copies.wait_for(*part);
    torch::Tensor& grad = s.grad.tensor;
    // fp32 first where the gradient is scaled in place or the kernel needs it, as the resident step does; only
    // enginery's own kernel reads a bf16 gradient as it is.
    if (grad.scalar_type() != params_[i].scalar_type() && (!grad_multipliers.empty() || !own_kernel_)) {
      grad = grad.to(params_[i].scalar_type());
    }
    for (const auto& m : grad_multipliers) grad.mul_(m);
    update_one(i, s.param.tensor, grad, s.exp_avg.tensor, s.exp_avg_sq.tensor, lr, grad_scale, found_inf);
    std::shared_ptr<c10::Event> done;
    if (i < compute_copies_.size() && compute_copies_[i].defined()) {
      done = copies.download_into(compute_copies_[i], s.param.tensor.to(compute_copies_[i].scalar_type()));
    }
    if (params_on_host_) done = copies.download_into(params_[i], s.param.tensor);
    if (state_on_host_) {
      copies.download_into(exp_avg_[i], s.exp_avg.tensor);
      done = copies.download_into(exp_avg_sq_[i], s.exp_avg_sq.tensor);
    }
    downloads.push_back(done);
  }
  copies.synchronize();  // the host state is the updated one when the step returns
}

// One pass over each shard's memory (read p, g, m, v; write p, m, v), split over ATen's intra-op threads: the host
// step is bound by host memory bandwidth, and ATen's unfused ops would make about three times the passes. The same
// math as the reference step, in fp32 with the moments' bias corrections folded into two scalars, so it agrees with
// the device step to fp32 rounding, not bitwise. The gradient multipliers (1/scale, clip coefficient) are read once.
void AdamW::step_on_host(double lr, const std::vector<torch::Tensor>& grad_multipliers) {
  if (!copies_ || !params_on_host_ || !state_on_host_) {
    throw EngineryError("a host step needs params, grads and moments on the host", "AdamW::step_on_host");
  }
  torch::NoGradGuard no_grad;
  ++step_;
  if (fused_) advance_device_steps(torch::Tensor());  // the counters checkpoints read stay in step
  double multiplier = 1.0;
  for (const auto& m : grad_multipliers) multiplier *= m.item<double>();
  const float g_mul = static_cast<float>(multiplier);
  const float decay = static_cast<float>(1.0 - lr * weight_decay_);
  const float b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_), eps = static_cast<float>(eps_);
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(beta1_, static_cast<double>(step_))));
  const float inv_bias2_sqrt = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2_, static_cast<double>(step_))));
  promote_grads_to_param_dtype();
  for (size_t i = 0; i < params_.size(); ++i) {
    float* p = params_[i].data_ptr<float>();
    const float* g = grads_[i].data_ptr<float>();
    float* m = exp_avg_[i].data_ptr<float>();
    float* v = exp_avg_sq_[i].data_ptr<float>();
    at::parallel_for(0, params_[i].numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const float grad = g[k] * g_mul;
        const float mk = b1 * m[k] + (1.0f - b1) * grad;
        const float vk = b2 * v[k] + (1.0f - b2) * grad * grad;
        m[k] = mk;
        v[k] = vk;
        p[k] = p[k] * decay - step_size * mk / (std::sqrt(vk) * inv_bias2_sqrt + eps);
      }
    });
  }
}

}  // namespace fsdp
}  // namespace enginery
