#include "config/schema.h"

namespace enginery {

namespace {

void visit_trainer(ConfigVisitor& v, TrainConfig& c) {
  TrainerSection& t = c.trainer;
  v.field("trainer.project_name", t.project_name);
  v.field("trainer.experiment_name", t.experiment_name);
  v.field("trainer.total_training_steps", t.total_training_steps);
  v.field("trainer.total_epochs", t.total_epochs);
  v.field("trainer.save_freq", t.save_freq);
  v.field("trainer.test_freq", t.test_freq);
  v.field("trainer.log_freq", t.log_freq);
  v.field("trainer.val_before_train", t.val_before_train);
  v.field("trainer.default_local_dir", t.default_local_dir);
  v.choice("trainer.device", t.device, {"auto", "cpu", "cuda"});
  v.choice("trainer.resume_mode", t.resume_mode, {"disable", "auto"});
  v.field("trainer.max_ckpt_to_keep", t.max_ckpt_to_keep);
  v.field("trainer.collective_timeout_s", t.collective_timeout_s);
  v.field("trainer.rendezvous_timeout_s", t.rendezvous_timeout_s);

  v.field("plugins.dirs", c.plugins.dirs);
}

void visit_model_and_engine(ConfigVisitor& v, TrainConfig& c) {
  ModelConfig& m = c.model;
  v.field("model.path", m.path);
  v.field("model.tokenizer_path", m.tokenizer_path);
  v.field("model.enable_gradient_checkpointing", m.enable_gradient_checkpointing);
  v.field("model.use_remove_padding", m.use_remove_padding);
  v.field("model.trust_remote_code", m.trust_remote_code);
  v.optional_precision("model.override_dtype", m.override_dtype);

  EngineConfig& e = c.engine;
  v.field("engine.strategy", e.strategy);
  v.field("engine.micro_batch_size_per_gpu", e.micro_batch_size_per_gpu);
  v.field("engine.forward_only", e.forward_only);
  v.field("engine.seed", e.seed);
  v.field("engine.use_dynamic_bsz", e.use_dynamic_bsz);
  v.field("engine.max_token_len_per_gpu", e.max_token_len_per_gpu);
  v.field("engine.reshard_after_forward", e.reshard_after_forward);
  v.field("engine.fsdp_size", e.fsdp_size);
  v.field("engine.param_offload", e.param_offload);
  v.field("engine.optimizer_offload", e.optimizer_offload);
  v.field("engine.forward_prefetch", e.forward_prefetch);
  v.precision("engine.model_dtype", e.model_dtype);
  v.field("engine.entropy_from_logits_with_chunking", e.entropy_from_logits_with_chunking);
  v.has_table("engine.mixed_precision");
  v.precision("engine.mixed_precision.param_dtype", e.mixed_precision.param_dtype);
  v.precision("engine.mixed_precision.reduce_dtype", e.mixed_precision.reduce_dtype);
  v.precision("engine.mixed_precision.buffer_dtype", e.mixed_precision.buffer_dtype);
  GradScalerConfig& gs = e.grad_scaler;
  v.field("engine.grad_scaler.init_scale", gs.init_scale);
  v.field("engine.grad_scaler.growth_factor", gs.growth_factor);
  v.field("engine.grad_scaler.backoff_factor", gs.backoff_factor);
  v.field("engine.grad_scaler.growth_interval", gs.growth_interval);
  v.scaler_mode("engine.grad_scaler.enabled", gs.enabled);
  v.backend_table("engine", e.strategy, e.backend_options);
}

void visit_optim_data_loss(ConfigVisitor& v, TrainConfig& c) {
  OptimizerConfig& o = c.optim;
  v.field("optim.optimizer", o.optimizer);
  v.field("optim.lr", o.lr);
  v.field("optim.weight_decay", o.weight_decay);
  v.field("optim.betas", o.betas);
  v.field("optim.eps", o.eps);
  v.field("optim.clip_grad", o.clip_grad);
  v.field("optim.lr_warmup_steps", o.lr_warmup_steps);
  v.field("optim.lr_warmup_steps_ratio", o.lr_warmup_steps_ratio);
  v.choice("optim.lr_scheduler_type", o.lr_scheduler_type, {"constant", "cosine"});
  v.field("optim.min_lr_ratio", o.min_lr_ratio);
  v.field("optim.num_cycles", o.num_cycles);

  DataSection& d = c.data;
  v.field("data.train_files", d.train_files);
  v.field("data.val_files", d.val_files);
  v.field("data.train_batch_size", d.train_batch_size);
  v.field("data.max_length", d.max_length);
  v.choice("data.truncation", d.truncation, {"error", "left", "right"});
  v.choice("data.unknown_fields", d.unknown_fields, {"error", "ignore"});
  v.field("data.seed", d.seed);
  v.field("data.shuffle", d.shuffle);
  v.field("data.digits", d.digits);
  v.field("data.train_size", d.train_size);
  v.field("data.val_size", d.val_size);

  LossSection& l = c.loss;
  v.choice("loss.type", l.type, kLossTypes);
  v.field("loss.clip_ratio", l.clip_ratio);
  v.field("loss.clip_ratio_low", l.clip_ratio_low);
  v.field("loss.clip_ratio_high", l.clip_ratio_high);
  v.field("loss.clip_ratio_c", l.clip_ratio_c);
  v.field("loss.cliprange_value", l.cliprange_value);
  v.choice("loss.loss_agg_mode", l.loss_agg_mode, {"token-mean"});

  v.field("checkpoint.save_contents", c.checkpoint.save_contents);
  v.field("checkpoint.load_contents", c.checkpoint.load_contents);
  v.field("checkpoint.async_save", c.checkpoint.async_save);
}

// Read as [rollout] / [actor] or with verl's actor_rollout_ref. prefix (the parser accepts both spellings).
void visit_rl(ConfigVisitor& v, TrainConfig& c) {
  v.choice("algorithm.adv_estimator", c.algorithm.adv_estimator, {"none", "grpo"});
  v.field("algorithm.norm_adv_by_std_in_grpo", c.algorithm.norm_adv_by_std_in_grpo);

  RolloutSection& r = c.rollout;
  v.field("rollout.n", r.n);
  v.field("rollout.temperature", r.temperature);
  v.field("rollout.top_p", r.top_p);
  v.field("rollout.top_k", r.top_k);
  v.field("rollout.response_length", r.response_length);
  v.precision("rollout.dtype", r.dtype);

  ActorSection& a = c.actor;
  v.field("actor.ppo_mini_batch_size", a.ppo_mini_batch_size);
  v.field("actor.ppo_epochs", a.ppo_epochs);
  v.field("actor.clip_ratio", a.clip_ratio);
  v.field("actor.clip_ratio_low", a.clip_ratio_low);
  v.field("actor.clip_ratio_high", a.clip_ratio_high);
  v.field("actor.clip_ratio_c", a.clip_ratio_c);
  v.field("actor.use_kl_loss", a.use_kl_loss);
  v.field("actor.kl_loss_coef", a.kl_loss_coef);
  v.choice("actor.kl_loss_type", a.kl_loss_type, {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"});
  v.field("actor.entropy_coeff", a.entropy_coeff);
  v.choice("actor.loss_agg_mode", a.loss_agg_mode, {"token-mean"});
}

}  // namespace

void visit_config(ConfigVisitor& v, TrainConfig& c) {
  visit_trainer(v, c);
  visit_model_and_engine(v, c);
  visit_optim_data_loss(v, c);
  visit_rl(v, c);
}

std::string TrainConfig::output_dir() const {
  return trainer.default_local_dir.empty() ? "runs/" + trainer.experiment_name : trainer.default_local_dir;
}

std::string TrainConfig::where(const std::string& key) const {
  auto it = origins.find(key);
  return it != origins.end() ? it->second : source;
}

std::string TrainConfig::model_type() const { return loss.type == "value" ? "value_model" : "language_model"; }

}  // namespace enginery
