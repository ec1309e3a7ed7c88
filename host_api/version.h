#pragma once
// Version constants of the host/plugin contract. A plugin reports the values it was compiled with; the loader
// compares them with its own (docs/ARCHITECTURE.md, "The contract").

namespace enginery {

// Bump the major version on any change that breaks binary compatibility of host_api types; bump the minor version
// when something is added that older plugins can ignore. A host accepts plugins with the same major and a minor
// that is not newer than its own.
// 2.0: typed configuration, a ConfigSupport registered with each factory, the host-owned micro-batch loop (engines
// implement forward_step only), precision and scaler private to BaseEngine. A 1.x plugin is refused.
// 2.1: BaseEngine::to (offload) and the OffloadableEngine interface that implements it; BaseEngine's vtable and
// layout are unchanged, so a 2.0 plugin still loads and its engines refuse to() by name.
constexpr int kApiVersionMajor = 2;
// 2.2: BaseEngine::weight_stream and the WeightExportingEngine interface behind it (host_api/weight_export.h); a
// 2.0/2.1 plugin's engines stream through their get_per_tensor_param.
// 2.3: train_mode()/eval_mode() offload and reload with [engine.<backend>] offload_outside_modes
// (host_api/mode_offload.h); the state they need sits in padding, so sizes and offsets are those of 2.0.
// 2.4: batch_temperature() (host_api/batch.h): the batch metadata `temperature`, validated by the host's loop for
// every engine; engines that scale their logits by it declare the capability `temperature` in their manifest, and
// hosts pass a value other than 1 only to those (enginery.verl refuses it by name for the others).
// 2.5: the ShardExportingEngine interface (host_api/shard_export.h): this rank's pieces of the weights by Hugging Face
// name with where they sit in the full tensors, nothing gathered (verl's get_per_tensor_param_shard); engines that
// implement it declare the capability `shard-export`.
// 2.6: the TrainStateEngine interface (host_api/train_state.h): this rank's parameter and gradient pieces as views of
// the engine's storage, and the optimizer's hyperparameters read and written between steps (what verl reads as
// engine.module and engine.optimizer); engines that implement it declare the capability `train-state`.
constexpr int kApiVersionMinor = 6;

// Version of the plugin.toml schema this host reads.
constexpr int kManifestVersion = 1;

}  // namespace enginery
