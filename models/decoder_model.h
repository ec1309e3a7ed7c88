#pragma once
// The interface between models and engines (docs/ARCHITECTURE.md, "Layers": plugin -> models). A DecoderModel is a torch::nn::Module
// whose parameters keep their Hugging Face names (model.named_parameters() yields "model.layers.0.mlp.up_proj.weight"
// etc.) and which is split into units that an FSDP engine shards one by one.
#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "host_api/model_output.h"
#include "models/fp8_linear.h"

namespace enginery {
namespace models {

class SequenceParallelGroup;  // models/sequence_parallel.h

struct ModelInputs {
  // Padded: input_ids [B, T] with attention_mask [B, T] (1 = real token, left or right padding); outputs [B, T],
  // log_probs[b, t] for token t itself (0 where there is none). Packed (cu_seqlens defined, host_api/batch.h's
  // [Note: packed batch]): input_ids [N], the sequences' ends in cu_seqlens (int64 [S + 1], empty sequences
  // allowed), attention_mask unused; outputs [N] in verl's alignment (log_probs[t] for token t + 1).
  torch::Tensor input_ids;
  torch::Tensor attention_mask;
  torch::Tensor cu_seqlens;
  torch::Tensor position_ids;    // like input_ids, int64; undefined -> counted from 0 in each sequence
  // model.use_remove_padding: compute on the valid tokens only, packed into one row; off, a packed input is
  // computed padded. Outputs keep the input's form either way.
  bool remove_padding = false;
  // Ulysses sequence parallelism (models/sequence_parallel.h): this rank computes its slice of the packed tokens.
  // Null or of size 1: off. Only a model whose check_sequence_parallel accepts the size may be handed one.
  const SequenceParallelGroup* sequence_parallel = nullptr;
};

struct HeadOptions {
  bool compute_entropy = false;
  // The language head's log-probs and entropy are those of softmax(logits / temperature) (batch_temperature()).
  double temperature = 1.0;
  // Token rows per chunk of the log-prob head; 0 = automatic (one chunk's fp32 logits about 64 MiB).
  int64_t chunk_tokens = 0;
};

// Called by the model around each unit's forward, in execution order. An engine gathers the unit's parameters in
// pre_forward and may free them in post_forward; post_forward sees the unit's outputs (the tensors flowing to the
// next unit) so it can hook their gradients, e.g. to gather again before the unit's backward.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void pre_forward(size_t unit) = 0;
  virtual void post_forward(size_t unit, const std::vector<torch::Tensor>& outputs) = 0;
};

struct Unit {
  std::string name;                        // "embed", "layers.0", ..., "head"
  std::shared_ptr<torch::nn::Module> module;  // owns exactly the unit's parameters (a submodule of the model)
};

class DecoderModel : public torch::nn::Module {
 public:
  ~DecoderModel() override = default;

  // Execution order. Unit 0 holds the token embeddings; units 1..L the decoder layers; the last unit the final
  // norm and the head (lm_head or the value head). With tied embeddings the head reuses unit 0's weight and has
  // none of its own, so unit 0 must stay gathered until the head's backward is done (as FSDP2's root).
  virtual std::vector<Unit> units() = 0;

  // Runs the whole model; `hooks` may be null (plain unsharded run). language_model heads fill log_probs (and
  // entropy when asked) without materialising the full [tokens x vocab] fp32 logits; value_model heads fill values.
  virtual ModelOutput forward(const ModelInputs& inputs, const HeadOptions& head, UnitHooks* hooks) = 0;

  virtual std::string hf_model_type() const = 0;  // "llama" | "qwen2" | "qwen3" | "qwen3_moe"
  virtual bool tied_embeddings() const = 0;
  // The decoder layers' projections as FP8 GEMMs with `recipe`'s scaling (models/fp8_linear.h), or bf16 (kOff). A
  // model without them throws for anything but kOff.
  virtual void set_fp8_recipe(Fp8Recipe recipe);
  // Throws EngineryError naming `key` and the allowed sizes unless this model runs Ulysses sequence parallelism of
  // `size` ranks (models/sequence_parallel.h) in a world of `world`. A model without it accepts size 1 only.
  virtual void check_sequence_parallel(int64_t size, int64_t world, const std::string& key) const;
};

}  // namespace models
}  // namespace enginery
