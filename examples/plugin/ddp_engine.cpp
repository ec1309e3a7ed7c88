// DdpEngine (ddp_engine.h). Read it next to host_api/base_engine.h: each method is one of the contract's.
#include "ddp_engine.h"

#include <host_api/error.h>
#include <support/torch_compat.h>
#include <models/model_factory.h>

#include <cmath>
#include <filesystem>
#include <iostream>

namespace example {

using enginery::Batch;
using enginery::EngineryError;

DdpEngine::DdpEngine(enginery::EngineArgs args) : args_(std::move(args)), device_(torch::kCPU) {
  // The host already refused every configuration key beyond config_support(); what is left are the values only
  // this engine knows. A bad one stops here, at registry.create(), naming the field.
  auto reject = [this](bool bad, const std::string& what, const std::string& field, const std::string& allowed) {
    if (bad) throw EngineryError(what, where(field), allowed);
  };
  if (args_.device == "cuda") device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(args_.local_rank));
  reject(args_.device != "cpu" && args_.device != "cuda", "unknown device '" + args_.device + "'", "device",
         "cpu, cuda");
  reject(args_.world_size > 1 && !args_.world_group, "no world group for world size > 1", "world_group", "a group");
  reject(args_.optim.optimizer != "AdamW", "unknown optimizer '" + args_.optim.optimizer + "'", "optim.optimizer",
         "AdamW");
  const std::string& schedule = args_.optim.lr_scheduler_type;
  reject(schedule != "constant" && schedule != "cosine", "unknown schedule '" + schedule + "'",
         "optim.lr_scheduler_type", "constant, cosine");
  // As verl: a non-positive lr_warmup_steps means "a ratio of total_training_steps".
  warmup_steps_ = args_.optim.lr_warmup_steps > 0
                      ? args_.optim.lr_warmup_steps
                      : static_cast<int64_t>(args_.optim.lr_warmup_steps_ratio * args_.optim.total_training_steps);
}

enginery::ConfigSupport DdpEngine::config_support() {
  enginery::ConfigSupport support;  // the defaults: fp32 reductions and buffers, no HSDP or offload
  support.param_dtypes = {c10::kFloat};
  // fp16 would need a grad scaler, which this engine does not have; bf16 only where CPU autocast has it.
  if (enginery::compat::autocast_supported(c10::DeviceType::CPU, c10::kBFloat16)) {
    support.param_dtypes.push_back(c10::kBFloat16);
  }
  support.scaler_modes = {enginery::ScalerMode::kAuto, enginery::ScalerMode::kNever};
  support.dynamic_bsz = true;  // the host's loop forms the micro-batches; forward_step takes any number of rows
  support.remove_padding = true;  // the model packs the valid tokens; forward_step passes the flag on
  return support;
}

std::string DdpEngine::where(const std::string& field) const {
  return "example ddp engine, rank " + std::to_string(args_.rank) + ", " + field;
}

void DdpEngine::require_initialized(const char* method) const {
  if (!model_) throw EngineryError(std::string(method) + " before initialize()", where(method));
}

void DdpEngine::initialize() {
  enginery::models::BuildOptions options;
  options.device = device_;
  options.seed = args_.engine.seed;
  model_ = enginery::models::build_model(args_.model, args_.model_type, options);
  model_->to(torch::kFloat);  // fp32 weights whatever the checkpoint's dtype; autocast lowers the compute only
  params_ = model_->parameters();
  {
    // Replicas must start equal. Every rank built the same weights (same seed or files); rank 0's win anyway.
    torch::NoGradGuard no_grad;
    for (auto& p : params_) {
      std::vector<at::Tensor> one{p};
      if (args_.world_size > 1) args_.world_group->broadcast(one)->wait();
    }
  }
  // BaseEngine's constructor set bf16; fp32 turns autocast off. The whole model stays fp32, so reductions and
  // buffers are fp32 whatever was asked (the host refused anything else).
  const auto& mp = args_.engine.mixed_precision;
  set_precision({mp.param_dtype, c10::kFloat, c10::kFloat}, nullptr, args_.engine.grad_scaler.enabled);
  const auto& o = args_.optim;
  auto adamw = torch::optim::AdamWOptions(lr_at(0)).betas(std::make_tuple(o.betas[0], o.betas[1]));
  optimizer_ = std::make_unique<torch::optim::AdamW>(params_, adamw.eps(o.eps).weight_decay(o.weight_decay));
  set_training(is_training());
}

void DdpEngine::set_training(bool training) {
  BaseEngine::set_training(training);
  if (model_) model_->train(training);
}

enginery::MicroBatchResult DdpEngine::forward_step(const Batch& micro_batch, const enginery::LossFn& loss_fn,
                                                   const enginery::LossContext& ctx, bool forward_only) {
  require_initialized("forward_step");
  enginery::models::ModelInputs inputs;
  // A packed micro-batch (batch.h's [Note: packed batch]): the tokens back to back, each sequence's end in
  // cu_seqlens; the model returns log-probs in verl's alignment (the next token's, 0 at a sequence's last token).
  inputs.input_ids = micro_batch.at("input_ids").to(device_);
  inputs.cu_seqlens = micro_batch.at("cu_seqlens");
  if (micro_batch.has("position_ids")) inputs.position_ids = micro_batch.at("position_ids").to(device_);
  inputs.remove_padding = args_.model.use_remove_padding;
  enginery::models::HeadOptions head;
  head.compute_entropy = ctx.calculate_entropy;
  head.temperature = enginery::batch_temperature(micro_batch);
  enginery::MicroBatchResult result;
  {
    enginery::compat::AutocastScope autocast(device_.type(), autocast_dtype());  // clears its cache on exit
    result.output = model_->forward(inputs, head, /*hooks=*/nullptr);
  }
  if (loss_fn) {
    enginery::LossResult loss = loss_fn(result.output, micro_batch.to(device_), ctx);
    result.loss = loss.loss;
    result.metrics = std::move(loss.metrics);
  }
  if (!forward_only && torch::GradMode::is_enabled()) {
    if (!result.loss.defined()) throw EngineryError("a training step needs a loss function", where("loss_fn"));
    result.loss.backward();  // gradients accumulate in .grad; they are summed over ranks in optimizer_step()
  }
  return result;
}

void DdpEngine::optimizer_zero_grad() {
  require_initialized("optimizer_zero_grad");
  for (auto& p : params_) p.mutable_grad().reset();
}

torch::Tensor DdpEngine::optimizer_step() {
  require_initialized("optimizer_step");
  torch::NoGradGuard no_grad;
  // One all-reduce per step over one flat copy of every gradient (zeros where a parameter got none). A SUM: the
  // host's loss is already divided by the global token count. Reducing here rather than in the backward keeps
  // accumulation over several forward_backward_batch calls exact.
  std::vector<torch::Tensor> grads;
  for (auto& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad().reshape(-1));
  }
  auto flat = torch::cat(grads);
  all_reduce(flat);
  auto norm = flat.norm();  // every rank holds the same sum, hence the same norm and the same skip decision
  if (!std::isfinite(norm.item<double>())) {
    if (args_.rank == 0) std::cerr << "example ddp: grad norm " << norm.item<double>() << ", step skipped\n";
    return norm;
  }
  if (args_.optim.clip_grad > 0.0) {  // as torch.nn.utils.clip_grad_norm_
    flat.mul_(torch::clamp(args_.optim.clip_grad / (norm + 1e-6), c10::nullopt, 1.0));
  }
  int64_t offset = 0;
  for (auto& p : params_) {
    p.grad().copy_(flat.narrow(0, offset, p.numel()).view_as(p));
    offset += p.numel();
  }
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr_at(scheduler_step_));
  }
  optimizer_->step();
  return norm;
}

double DdpEngine::lr_scheduler_step() { return lr_at(++scheduler_step_); }

double DdpEngine::lr_at(int64_t step) const {
  const auto& o = args_.optim;
  const double s = static_cast<double>(step), warmup = static_cast<double>(std::max<int64_t>(1, warmup_steps_));
  if (o.lr_scheduler_type == "constant") return o.lr * (step < warmup_steps_ ? s / warmup : 1.0);
  if (step < warmup_steps_) return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * s / warmup);
  const double progress = (s - static_cast<double>(warmup_steps_)) /
                          std::max(1.0, static_cast<double>(o.total_training_steps - warmup_steps_));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * 2.0 * o.num_cycles * progress));
  return o.lr * std::max(o.min_lr_ratio, o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

void DdpEngine::get_per_tensor_param(const std::function<void(const std::string&, const torch::Tensor&)>& visit) {
  require_initialized("get_per_tensor_param");
  torch::NoGradGuard no_grad;
  for (const auto& item : model_->named_parameters()) visit(item.key(), item.value().detach());  // HF names
}

// Every rank holds the same state, so rank 0 writes one file and the others wait for it; every rank reads it back.
void DdpEngine::save_checkpoint(const std::string& path, int64_t global_step, int64_t max_ckpt_to_keep) {
  require_initialized("save_checkpoint");
  if (args_.rank == 0) {
    std::filesystem::create_directories(path);
    torch::serialize::OutputArchive archive, optimizer;
    for (const auto& item : model_->named_parameters()) archive.write("model." + item.key(), item.value().detach());
    optimizer_->save(optimizer);  // AdamW moments and step counts
    archive.write("optimizer", optimizer);
    archive.write("scheduler_step", torch::tensor({scheduler_step_}));
    archive.write("global_step", torch::tensor({global_step}));
    const std::string file = checkpoint_file(path);
    archive.save_to(file + ".tmp");  // a crash never leaves a truncated file under the real name
    std::filesystem::rename(file + ".tmp", file);
  }
  barrier();
  saved_checkpoints_.push_back(path);
  while (max_ckpt_to_keep > 0 && static_cast<int64_t>(saved_checkpoints_.size()) > max_ckpt_to_keep) {
    if (args_.rank == 0 && saved_checkpoints_.front() != path) enginery::compat::remove_all(saved_checkpoints_.front());
    saved_checkpoints_.pop_front();
  }
}

void DdpEngine::load_checkpoint(const std::string& path) {
  require_initialized("load_checkpoint");
  const std::string file = checkpoint_file(path);
  if (!std::filesystem::exists(file)) {
    throw EngineryError("no checkpoint file " + file, where("load_checkpoint"), "a directory this engine saved");
  }
  torch::serialize::InputArchive archive, optimizer;
  archive.load_from(file, device_);
  torch::NoGradGuard no_grad;
  for (const auto& item : model_->named_parameters()) {
    torch::Tensor saved;
    archive.read("model." + item.key(), saved);
    item.value().copy_(saved);
  }
  archive.read("optimizer", optimizer);
  optimizer_->load(optimizer);
  torch::Tensor step;
  archive.read("scheduler_step", step);
  scheduler_step_ = step.item<int64_t>();
  optimizer_zero_grad();
}

void DdpEngine::all_reduce(torch::Tensor& tensor) const {
  if (args_.world_size == 1) return;
  std::vector<at::Tensor> one{tensor};
  args_.world_group->allreduce(one)->wait();
}

void DdpEngine::barrier() const {
  if (args_.world_size > 1) args_.world_group->barrier()->wait();
}

}  // namespace example
